"""`reqdrive validate` as a real process: the traps it refuses before a run falls into them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.e2e.test_run_cli import git, run_cli
from tests.integration.test_repo_cli import DONE_WHEN, checkout, commit_all

VALIDATE = [sys.executable, "-m", "bot.cli", "validate"]
CONFIG = ".github/reqdrive.yml"
REQS = "docs/requirements"


def validate(repo: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli(repo, [*VALIDATE, *extra])


def problems(repo: Path) -> dict[str, str]:
    done = validate(repo, "--json")
    assert "Traceback" not in done.stderr
    return {p["file"]: p["message"] for p in json.loads(done.stdout)["problems"]}


def test_the_untouched_init_output_is_refused_until_written_and_committed(
    tmp_path: Path,
) -> None:
    repo = checkout(tmp_path, {"pyproject.toml": "[project]\nname = 'x'\n"})
    assert run_cli(repo, [sys.executable, "-m", "bot.cli", "init"]).returncode == 0
    done = validate(repo)
    assert done.returncode == 3
    assert done.stderr.splitlines() == [
        f"{CONFIG}: is not committed on main, and run reads the config on main: commit it, "
        "or use --config-from-worktree",
        f"{REQS}/REQ-001-example.md: still holds reqdrive init's template text (<one line "
        "saying what to build>): write the requirement over it, or delete the file",
    ]
    assert done.stdout.splitlines()[-1] == f"2 problem(s): {CONFIG}, 1 requirement(s)"
    (repo / REQS / "REQ-001-example.md").write_text("# REQ-001: Export\n" + DONE_WHEN)
    commit_all(repo)
    done = validate(repo)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith(f"ok: {CONFIG}, 1 requirement(s)")


def test_a_requirement_without_acceptance_criteria_is_refused_with_the_rule(
    tmp_path: Path,
) -> None:
    files = {
        f"{REQS}/REQ-001-prose.md": "# Export\nLet people export a CSV.\n",
        f"{REQS}/REQ-002-heading-only.md": "# Export\n\n## Done when\n\nIt works.\n",
        f"{REQS}/REQ-003-list-elsewhere.md": "# Export\n\n## What\n\n- a CSV\n",
        f"{REQS}/REQ-004-ok.md": "# Export\n\n### Acceptance criteria:\n\n1. a CSV\n",
        f"{REQS}/REQ-005-ok.md": "# Export\n\n**Why**\n\n## Done When\n* a CSV\n",
    }
    repo = checkout(tmp_path, files)
    found = problems(repo)
    rule = (
        "has no acceptance criteria: add a '## Done when' (or '## Acceptance criteria') "
        "section with at least one '- ' item, each a check a reviewer or a test can make"
    )
    refused = ["REQ-001-prose.md", "REQ-002-heading-only.md", "REQ-003-list-elsewhere.md"]
    assert found == {f"{REQS}/{name}": rule for name in refused}
    assert validate(repo).returncode == 8


def test_two_files_with_one_number_are_refused(tmp_path: Path) -> None:
    repo = checkout(
        tmp_path,
        {
            f"{REQS}/REQ-001-a.md": "# A\n" + DONE_WHEN,
            f"{REQS}/REQ-001-b.md": "# B\n" + DONE_WHEN,
            f"{REQS}/REQ-2.md": "# C\n" + DONE_WHEN,
            f"{REQS}/REQ-002-d.md": "# D\n" + DONE_WHEN,
        },
    )
    assert problems(repo) == {
        f"{REQS}/REQ-001-b.md": f"has the same number (REQ-001) as {REQS}/REQ-001-a.md: give "
        "one of them a number of its own, such as REQ-003",
        f"{REQS}/REQ-2.md": f"has the same number (REQ-002) as {REQS}/REQ-002-d.md: give one "
        "of them a number of its own, such as REQ-003",
    }


def test_names_that_will_never_run_are_refused_with_the_name_to_use(tmp_path: Path) -> None:
    text = "# X\n" + DONE_WHEN
    repo = checkout(
        tmp_path,
        {
            f"{REQS}/req-004-lower.md": text,
            f"{REQS}/REQ4.md": text,
            f"{REQS}/REQ-005.txt": text,
            f"{REQS}/archive/REQ-006-old.md": text,
            f"{REQS}/REQ-7.md": text,  # the rule's own form: REQ-, anything, .md
            f"{REQS}/README.md": "how we write requirements\n",
            f"{REQS}/requirements.txt": "not one\n",
            "notes/req-9.md": text,  # outside requirementsDir: never meant to run here
        },
    )
    rule = f"will never run (a run reads only REQ-*.md directly in {REQS}/)"
    assert problems(repo) == {
        f"{REQS}/req-004-lower.md": f"{rule}: rename it to {REQS}/REQ-004-lower.md",
        f"{REQS}/REQ4.md": f"{rule}: rename it to {REQS}/REQ-4.md",
        f"{REQS}/REQ-005.txt": f"{rule}: rename it to {REQS}/REQ-005.md",
        f"{REQS}/archive/REQ-006-old.md": f"{rule}: move it to {REQS}/REQ-006-old.md, or "
        "rename it without REQ to keep it as a draft",
    }
    done = validate(repo)
    assert done.returncode == 8
    assert (
        done.stdout.splitlines()[-1] == "4 problem(s): no config file (defaults), 1 requirement(s)"
    )


def test_a_config_that_differs_from_the_branch_run_reads_is_refused(tmp_path: Path) -> None:
    repo = checkout(
        tmp_path,
        {CONFIG: "testCommand: make test\n", f"{REQS}/REQ-001-x.md": "# X\n" + DONE_WHEN},
    )
    assert validate(repo).returncode == 0
    git(repo, "switch", "-q", "-c", "feature")
    (repo / CONFIG).write_text("testCommand: make check\n")
    done = validate(repo)
    assert done.returncode == 3
    assert done.stderr.splitlines() == [
        f"{CONFIG}: differs from the one committed on feature, and run reads the config on "
        "feature: commit it, or use --config-from-worktree"
    ]
    commit_all(repo)
    assert validate(repo).returncode == 0


def test_a_placeholder_left_as_a_value_is_refused(tmp_path: Path) -> None:
    config = (
        'testCommand: "<the command that runs your tests, such as make test>"\n'
        "gates:\n  - name: types\n    command: <your type checker>\n"
    )
    repo = checkout(tmp_path, {CONFIG: config})
    done = validate(repo)
    assert done.returncode == 3
    assert done.stderr.splitlines() == [
        f"{CONFIG}: key 'testCommand' still holds the placeholder <the command that runs your "
        "tests, such as make test>: set it",
        f"{CONFIG}: key 'gates' still holds the placeholder <your type checker>: set it",
    ]
