"""`reqdrive run` reads the config from the base branch: it says so when the working tree's
differs, and `--config-from-worktree` uses the working tree's without committing anything."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.e2e.test_run_bad_input import make_project
from tests.e2e.test_run_cli import BRANCH, command, git, run_cli, scenario_file
from tests.integration.test_pipeline import PYTEST, implement, prd

pytestmark = pytest.mark.e2e
CONFIG = ".github/reqdrive.yml"
EDITED = {"testCommand": PYTEST, "gates": [{"name": "marker", "command": "true"}]}


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return make_project(tmp_path)


def edit_config(checkout: Path) -> None:
    (checkout / CONFIG).write_text(yaml.safe_dump(EDITED))


def run_one_story(tmp_path: Path, checkout: Path, *extra: str) -> str:
    """Runs one story; returns stderr after checking the run ended ready."""
    scenario = scenario_file(
        tmp_path, {"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}}
    )
    done = run_cli(checkout, command(tmp_path, scenario, "--run-id", "demo", *extra))
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_run_warns_in_one_line_that_it_reads_the_committed_config(
    tmp_path: Path, checkout: Path
) -> None:
    edit_config(checkout)
    stderr = run_one_story(tmp_path, checkout)
    warnings = [line for line in stderr.splitlines() if CONFIG in line]
    assert warnings == [
        f"reqdrive: warning: {CONFIG} differs from the one committed on main, and run reads "
        "the config on main: commit it, or use --config-from-worktree"
    ]
    assert "| marker |" not in (tmp_path / "work/runs/demo/pr.md").read_text()


def test_config_from_worktree_uses_the_edited_config_and_commits_nothing(
    tmp_path: Path, checkout: Path
) -> None:
    edit_config(checkout)
    head = git(checkout, "rev-parse", "main")
    stderr = run_one_story(tmp_path, checkout, "--config-from-worktree")
    assert "warning" not in stderr
    assert "| marker |" in (tmp_path / "work/runs/demo/pr.md").read_text()
    assert git(checkout, "rev-parse", "main") == head
    assert git(checkout, "status", "--porcelain") == f"M {CONFIG}"
    assert git(checkout, "log", "--format=%s", f"main..{BRANCH}").splitlines() == [
        "feat: [US-001] - Feature 1",
        "test: [US-001] - Feature 1",  # its frozen tests, before its code
    ]


def test_config_from_worktree_refuses_a_bad_config_naming_the_key(
    tmp_path: Path, checkout: Path
) -> None:
    (checkout / CONFIG).write_text("testComand: make\n")
    scenario = scenario_file(tmp_path, {"plan": [{"prd": prd(1)}]})
    done = run_cli(checkout, command(tmp_path, scenario, "--config-from-worktree"))
    assert done.returncode == 3
    assert "unknown key 'testComand'" in done.stderr and "Traceback" not in done.stderr
