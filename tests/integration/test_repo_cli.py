"""`reqdrive init` and `reqdrive validate` on real checkouts (Python, Node, Go) in tmp_path."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bot.cli import main
from worker.model.repo_config import parse_repo_config

LAYOUTS = {
    "python": {"pyproject.toml": "[project]\nname = 'x'\n\n[tool.ruff]\nline-length = 100\n"},
    "node": {
        "package.json": json.dumps(
            {
                "scripts": {"test": "jest", "lint": "eslint ."},
                "devDependencies": {"jest-junit": "1"},
            }
        )
    },
    "go": {"go.mod": "module example.com/x\n\ngo 1.22\n"},
}
EXPECTED = {
    "python": {"testCommand": "python -m pytest -q", "lintCommand": "ruff check ."},
    "node": {"lintCommand": "npm run lint"},
    "go": {"lintCommand": "go vet ./..."},
}


DONE_WHEN = "\n## Done when\n\n- it can be checked\n"


def checkout(tmp_path: Path, files: dict[str, str], *, commit: bool = True) -> Path:
    """A repository holding `files`, committed on main unless told (`run` reads its config
    from the branch, so validate refuses an uncommitted one)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    if commit:
        commit_all(repo)
    return repo


def commit_all(repo: Path) -> None:
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "files"],
        cwd=repo,
        check=True,
    )


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_init_writes_a_valid_commented_config_for_the_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], layout: str
) -> None:
    repo = checkout(tmp_path, LAYOUTS[layout])
    monkeypatch.chdir(repo)
    assert main(["init"]) == 0
    text = (repo / ".github/reqdrive.yml").read_text()
    example = repo / "docs/requirements/REQ-001-example.md"
    assert text.startswith("# reqdrive's settings") and f"for a {layout} project" in text
    config = parse_repo_config(text, ".github/reqdrive.yml")
    for key, value in EXPECTED[layout].items():
        assert config.model_dump(by_alias=True)[key] == value
    assert ".github/workflows/**" in (config.forbidden_paths or [])
    assert (repo / "docs/requirements/REQ-001-example.md").read_text().startswith("# REQ-001")
    out = capsys.readouterr().out
    assert "git add .github/reqdrive.yml docs/requirements/REQ-001-example.md" in out
    assert (
        "reqdrive validate" in out and "reqdrive plan docs/requirements/REQ-001-example.md" in out
    )
    assert main(["validate"]) == 3  # the template untouched, the config not committed
    example.write_text("# REQ-001: Export\n" + DONE_WHEN)
    commit_all(repo)
    assert main(["validate"]) == 0


def test_init_names_the_per_test_report_it_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = checkout(tmp_path, LAYOUTS["node"])
    monkeypatch.chdir(repo)
    assert main(["init"]) == 0
    config = parse_repo_config((repo / ".github/reqdrive.yml").read_text(), "r.yml")
    assert [(g.name, g.command, g.junit) for g in config.gates] == [
        (
            "tests",
            "JEST_JUNIT_OUTPUT_FILE=reqdrive-junit.xml npx --no-install jest --ci "
            "--reporters=default --reporters=jest-junit",
            "reqdrive-junit.xml",
        )
    ]


def test_init_without_a_known_project_says_to_set_the_test_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = checkout(tmp_path, {"README": "x"})
    monkeypatch.chdir(repo)
    assert main(["init"]) == 0
    out = capsys.readouterr().out
    assert "set testCommand yourself" in out
    assert "a unknown" not in out and "a project of no kind init knows" in out
    config = parse_repo_config((repo / ".github/reqdrive.yml").read_text(), "r.yml")
    assert config.test_command is None  # commented out: a run is a draft, never a broken command
    commit_all(repo)
    assert main(["validate"]) == 3
    assert (
        ".github/reqdrive.yml: testCommand is still reqdrive init's commented-out placeholder: "
        "set it to the command that runs your tests (without a check nothing verifies a story)"
    ) in capsys.readouterr().err.splitlines()
    yml = repo / ".github/reqdrive.yml"
    yml.write_text(yml.read_text() + "testCommand: make check\n")
    commit_all(repo)
    assert main(["validate"]) == 8  # the template requirement is left; the config is fine
    assert ".github/reqdrive.yml" not in capsys.readouterr().err


def test_init_never_overwrites_without_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = checkout(tmp_path, {".github/reqdrive.yml": "testCommand: make check\n"})
    monkeypatch.chdir(repo)
    assert main(["init"]) == 8
    assert (
        ".github/reqdrive.yml already exists; pass --force to replace them"
        in capsys.readouterr().err
    )
    assert (repo / ".github/reqdrive.yml").read_text() == "testCommand: make check\n"
    assert not (repo / "docs/requirements").exists()
    assert main(["init", "--force"]) == 0
    assert "reqdrive init" in (repo / ".github/reqdrive.yml").read_text()


def test_init_outside_a_checkout_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 8
    assert "is not inside a git repository" in capsys.readouterr().err


def test_validate_lists_every_problem_on_its_own_line_and_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = checkout(
        tmp_path,
        {
            ".github/reqdrive.yml": "testComand: pytest\nmaxIterations: 0\nprompts: ../../etc\n",
            "docs/requirements/REQ-001-a.md": "# A\n" + DONE_WHEN,
            "docs/requirements/REQ-002-empty.md": "  \n",
            "docs/requirements/REQ-a_b.md": "x\n" + DONE_WHEN,
            "docs/requirements/REQ-a-b.md": "y\n" + DONE_WHEN,
        },
    )
    assert main(["validate", str(repo)]) == 3
    err = capsys.readouterr().err.splitlines()
    assert err == [
        ".github/reqdrive.yml: key 'maxIterations': input should be greater than or equal to 1 "
        "(got 0)",
        ".github/reqdrive.yml: key 'prompts': value error, must be a folder inside the repository, "
        'relative to its top (such as docs/requirements or .reqdrive/prompts) (got "../../etc")',
        ".github/reqdrive.yml: unknown key 'testComand' (did you mean 'testCommand'?)",
        "docs/requirements/REQ-002-empty.md: is empty: write the requirement in it "
        "(a run of an empty file is refused)",
        "docs/requirements/REQ-a_b.md: has the same branch (reqdrive/req-a-b) as "
        "docs/requirements/REQ-a-b.md: rename one of them",
    ]


def test_validate_json_names_file_key_and_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = checkout(tmp_path, {".github/reqdrive.yml": "testCommand: a\ntestCommand: b\n"})
    assert main(["validate", str(repo), "--json"]) == 3
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert report["problems"] == [
        {
            "file": ".github/reqdrive.yml",
            "key": "testCommand",
            "message": "key 'testCommand' appears twice (lines 1 and 2); keep one",
        }
    ]


def test_validate_only_requirement_problems_exits_8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = checkout(tmp_path, {"docs/requirements/REQ-001.md": ""})
    assert main(["validate", str(repo), "--json"]) == 8
    report = json.loads(capsys.readouterr().out)
    assert [p["file"] for p in report["problems"]] == ["docs/requirements/REQ-001.md"]
    assert any("no .github/reqdrive.yml" in note for note in report["notes"])


def test_validate_checks_the_requirements_in_the_configured_folder_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = checkout(
        tmp_path,
        {
            ".github/reqdrive.yml": "requirementsDir: specs/\ntestCommand: pytest\n",
            "specs/REQ-002-x.md": "",
            "specs/drafts/later.md": "",  # a draft, under a name no rule is meant to match
            "specs/notes.md": "",
            "notes/REQ-003-y.md": "",
            "docs/requirements/REQ-001.md": "",  # the default folder, moved away by the config
        },
    )
    assert main(["validate", str(repo), "--json"]) == 8
    report = json.loads(capsys.readouterr().out)
    assert [p["file"] for p in report["problems"]] == ["specs/REQ-002-x.md"]  # empty


def test_validate_write_converts_the_seeds_reqdrive_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seeds = {
        "version": "0.3.0",
        "requirementsDir": "docs/requirements",
        "testCommand": "npm test",
        "model": "claude-sonnet-4-20250514",
        "maxIterations": 10,
        "baseBranch": "main",
        "prLabels": ["agent-generated"],
        "projectName": "demo",
        "completionHook": "notify-send done",
    }
    repo = checkout(tmp_path, {"reqdrive.json": json.dumps(seeds)})
    assert main(["validate", str(repo)]) == 3  # completionHook is no key of ours
    assert "unknown key 'completionHook'" in capsys.readouterr().err
    assert main(["validate", str(repo), "--write"]) == 3  # the new file is not committed yet
    assert (
        ".github/reqdrive.yml: is not committed on main, and run reads the config on main: "
        "commit it, or use --config-from-worktree"
    ) in capsys.readouterr().err
    commit_all(repo)
    assert main(["validate", str(repo)]) == 0
    (repo / ".github/reqdrive.yml").unlink()
    commit_all(repo)
    assert main(["validate", str(repo), "--write"]) == 3
    out = capsys.readouterr().out
    assert "wrote .github/reqdrive.yml from reqdrive.json" in out
    assert "completionHook: reqdrive runs no completion hook" in out and "model: moved" in out
    config = parse_repo_config((repo / ".github/reqdrive.yml").read_text(), ".github/reqdrive.yml")
    assert (config.test_command, config.agent_model, config.base_branch) == (
        "npm test",
        "claude-sonnet-4-20250514",
        "main",
    )
    assert main(["validate", str(repo), "--write"]) == 8  # never over an existing file
    assert ".github/reqdrive.yml already exists" in capsys.readouterr().err
