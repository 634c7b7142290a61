"""`reqdrive run` given bad input (by the agent, the repository or the command line): a clear
error and an exit code, never a traceback, and nothing written where it should not be."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.test_run_cli import (
    BRANCH,
    REQUIREMENT,
    command,
    environment,
    git,
    run_cli,
    scenario_file,
)
from tests.integration.test_pipeline import GITIGNORE, PYTEST, implement, prd, story

pytestmark = pytest.mark.e2e


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


def make_project(tmp_path: Path) -> Path:
    """A checkout with a test command and one committed requirement."""
    repo = tmp_path / "project"
    files = {
        ".gitignore": GITIGNORE,
        ".github/reqdrive.yml": yaml.safe_dump({"testCommand": PYTEST}),
        REQUIREMENT: "# REQ-001\nOne small feature.\n",
        "tests/test_base.py": "def test_base():\n    assert True\n",
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    return repo


def commit_file(repo: Path, name: str, text: str) -> None:
    (repo / name).parent.mkdir(parents=True, exist_ok=True)
    (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"change {name}")


def run_with_plan(
    tmp_path: Path, repo: Path, plan: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    scenario = scenario_file(tmp_path, {"plan": [plan], "stories": {"US-001": [implement(1)]}})
    return run_cli(repo, command(tmp_path, scenario, "--run-id", "demo"))


def one_story(**fields: Any) -> dict[str, Any]:
    return {**prd(1), "userStories": [{**story(1), **fields}]}


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ({"prd": one_story(title="Feature\x00one")}, "title: value error, must be one line"),
        ({"prd_raw": "[" * 100_000 + "]" * 100_000}, "nested 100000 levels deep"),
        ({"prd": one_story(description="x" * 10_000_000)}, "larger than"),
        ({"prd": one_story(notes="x" * 20_000)}, "notes: string should have at most 10000"),
    ],
    ids=["nul-in-title", "nested-100000-deep", "10-MB-field", "oversized-notes"],
)
def test_a_plan_the_worker_cannot_accept_exits_5_naming_the_problem(
    tmp_path: Path, project: Path, plan: dict[str, Any], message: str
) -> None:
    done = run_with_plan(tmp_path, project, plan)
    assert done.returncode == 5, done.stderr
    assert "planning failed 2 times" in done.stderr and message in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("prompts: ../../etc\n", "key 'prompts': value error, must be a folder inside"),
        ("testCommand: 'true'\ntestCommand: 'false'\n", "key 'testCommand' appears twice"),
        (
            "testCommand: 'false'\ngates:\n  - {name: tests, command: 'true'}\n",
            "key 'gates[0].name': the gate name 'tests' is already used by 'testCommand'",
        ),
    ],
    ids=["prompts-outside", "duplicate-key", "duplicate-gate"],
)
def test_a_repository_config_the_worker_refuses_exits_3_naming_the_key(
    tmp_path: Path, project: Path, config: str, message: str
) -> None:
    commit_file(project, ".github/reqdrive.yml", config)
    done = run_with_plan(tmp_path, project, {"prd": prd(1)})
    assert done.returncode == 3, done.stderr
    assert f".github/reqdrive.yml: {message}" in done.stderr
    assert "Traceback" not in done.stderr and "fatal:" not in done.stderr


def test_a_prompt_override_that_allocates_without_bound_exits_3_naming_the_template(
    tmp_path: Path, project: Path
) -> None:
    commit_file(project, ".reqdrive/prompts/plan.md.j2", "{{ requirement * 10**9 }}")
    done = run_with_plan(tmp_path, project, {"prd": prd(1)})
    assert done.returncode == 3, done.stderr
    assert "prompt override .reqdrive/prompts/plan.md.j2 cannot be rendered" in done.stderr
    assert "a repetition would make" in done.stderr


def test_agent_text_cannot_close_issues_or_ping_people_from_the_commit_or_pr_body(
    tmp_path: Path, project: Path
) -> None:
    plan = one_story(
        title="Feature 1, closes #2",
        acceptanceCriteria=["Fixes #3 and tells @octocat"],
    )
    done = run_with_plan(tmp_path, project, {"prd": plan})
    assert done.returncode == 0, done.stderr
    subject = git(project, "log", "-1", "--format=%s", BRANCH)
    assert subject == "feat: [US-001] - Feature 1, c\u200dloses #2"
    body = (tmp_path / "work/runs/demo/pr.md").read_text()
    assert "closes #2" not in body.lower() and "fixes #3" not in body.lower()
    assert "@octocat" not in body and "@\u200doctocat" in body


def test_a_run_id_outside_the_work_dir_is_refused_before_anything_is_written(
    tmp_path: Path, project: Path
) -> None:
    scenario = scenario_file(tmp_path, {"plan": [{"prd": prd(1)}]})
    before = sorted(p.name for p in tmp_path.iterdir())
    done = run_cli(project, command(tmp_path, scenario, "--run-id", "../../x"))
    assert done.returncode == 8
    assert "run id '../../x' is not valid: use 1 to 128 ASCII letters" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no work dir, no x
    assert not (tmp_path.parent / "x").exists()
    assert not (tmp_path / "calls.log").exists()


def test_a_bytecode_seed_others_may_write_is_refused_before_anything_runs(
    tmp_path: Path, project: Path
) -> None:
    seed = tmp_path / "seed"
    seed.mkdir()
    seed.chmod(0o777)
    scenario = scenario_file(tmp_path, {"plan": [{"prd": prd(1)}]})
    done = subprocess.run(
        command(tmp_path, scenario, "--run-id", "demo"),
        cwd=project,
        env={**environment(), "REQDRIVE_BYTECODE_SEED": str(seed)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 8, done.stderr
    assert f"the bytecode seed {seed} (REQDRIVE_BYTECODE_SEED) is writable by others" in done.stderr
    assert not (tmp_path / "calls.log").exists()  # no agent was called
    assert list(seed.iterdir()) == []
