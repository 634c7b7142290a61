"""Runs a person can manage, as real processes on a real checkout: each new run starts from the
base unless `--continue`, `reqdrive runs` lists them, `reqdrive discard` removes one."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
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
    wait_for,
)
from tests.integration.test_pipeline import GITIGNORE, PYTEST, implement, prd, story

pytestmark = pytest.mark.e2e
REQDRIVE = Path(sys.executable).with_name("reqdrive")
# The agent of a story wrecks its checkout's `.git`: the worker refuses to go on, the run fails.
# US-002's tests are frozen; its implement call then wrecks the worktree's git.
WRECK = {
    "tests": {"write": {"tests/test_feature_2.py": "def test_2():\n    assert False\n"}},
    "implement": {"run": ["sh", "-c", "rm .git && mkdir .git"]},
}


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A checkout whose base has a failing test, the one feature 1 makes pass."""
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    files = {
        ".gitignore": GITIGNORE,
        ".github/reqdrive.yml": yaml.safe_dump({"testCommand": PYTEST, "maxStoryRetries": 1}),
        REQUIREMENT: "# REQ-001\nSmall features.\n",
        "tests/test_base.py": "def test_base():\n    assert True\n",
        "tests/test_wanted.py": (
            "def test_wanted():\n    import feature_1\n\n    assert feature_1.value() == 1\n"
        ),
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    return repo


def run(
    tmp_path: Path, checkout: Path, scenario: dict[str, Any], *extra: str
) -> subprocess.CompletedProcess[str]:
    """`reqdrive run` of the requirement to its end, the agent following `scenario`."""
    return run_cli(checkout, command(tmp_path, scenario_file(tmp_path, scenario), *extra))


def reqdrive(tmp_path: Path, checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [str(REQDRIVE), *args, "--work-dir", str(tmp_path / "work")]
    return subprocess.run(
        argv, cwd=checkout, env=environment(), capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def failed_after_story_1(tmp_path: Path, checkout: Path) -> str:
    """Run `first`: US-001 passes (the base's failing test with it) and is pushed, then the
    run fails in US-002. Returns the head it left on the branch."""
    scenario = {"plan": [{"prd": prd(2)}], "stories": {"US-001": [implement(1)], "US-002": [WRECK]}}
    done = run(tmp_path, checkout, scenario, "--run-id", "first")
    assert done.returncode == 4, done.stderr
    return git(checkout, "rev-parse", BRANCH)


def test_a_new_run_after_a_failed_one_starts_from_the_base_and_keeps_the_earlier_head(
    tmp_path: Path, checkout: Path
) -> None:
    earlier = failed_after_story_1(tmp_path, checkout)
    assert git(checkout, "log", "--format=%s", f"main..{BRANCH}").splitlines() == [
        "feat: [US-001] - Feature 1",
        "test: [US-001] - Feature 1",  # its frozen tests, before its code
    ]

    scenario = {"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}}
    done = run(tmp_path, checkout, scenario, "--run-id", "second")

    assert done.returncode == 0, done.stderr
    kept = "refs/reqdrive/runs/first"
    assert f"{BRANCH} held run first's work ({earlier[:12]}), now kept as {kept}" in done.stderr
    assert git(checkout, "rev-parse", kept) == earlier  # nothing lost
    base = git(checkout, "rev-parse", "main")
    # The branch is the new run's alone, on the real base.
    # (its frozen tests, then its code)
    assert git(checkout, "rev-list", "--parents", "-n", "1", f"{BRANCH}~1").split()[1] == base
    assert git(checkout, "rev-list", "--count", f"main..{BRANCH}") == "2"
    body = (tmp_path / "work/runs/second/pr.md").read_text()
    assert f"at `{base[:12]}`" in body
    assert "Every test passed on the base commit" not in body
    assert "### Failures on the base commit" in body and "test_wanted" in body

    listed = reqdrive(tmp_path, checkout, "runs")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [line.split()[:4] for line in lines] == [
        ["second", "ready", REQUIREMENT, BRANCH],
        ["first", "failed", REQUIREMENT, BRANCH],
    ]


def test_a_new_run_id_after_a_draft_measures_the_real_base_not_the_drafts_branch(
    tmp_path: Path, checkout: Path
) -> None:
    draft = {
        "plan": [{"prd": prd(2)}],
        "stories": {"US-001": [implement(1)], "US-002": [implement(2, correct=False)]},
    }
    assert run(tmp_path, checkout, draft, "--run-id", "draft").returncode == 9
    scenario = {"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}}
    git(checkout, "checkout", "-q", BRANCH)  # the developer looks at the draft's branch

    looking = run(tmp_path, checkout, scenario, "--run-id", "next")

    assert looking.returncode == 4
    assert "switch to another branch there, or build on it with --continue draft" in (
        looking.stderr
    )
    git(checkout, "checkout", "-q", "main")
    done = run(tmp_path, checkout, scenario, "--run-id", "next")

    assert done.returncode == 0, done.stderr
    assert "now kept as refs/reqdrive/runs/draft" in done.stderr
    body = (tmp_path / "work/runs/next/pr.md").read_text()
    # The draft's branch passed every test; the base did not, and the body says so.
    assert "Every test passed on the base commit" not in body
    assert "Fixed by this branch (1)" in body and "test_wanted" in body


def test_continue_goes_on_from_the_earlier_runs_branch(tmp_path: Path, checkout: Path) -> None:
    earlier = failed_after_story_1(tmp_path, checkout)
    plan = {**prd(1), "userStories": [story(2)]}
    scenario = {"plan": [{"prd": plan}], "stories": {"US-002": [implement(2)]}}

    done = run(tmp_path, checkout, scenario, "--run-id", "third", "--continue", "first")

    assert done.returncode == 0, done.stderr
    assert "kept as" not in done.stderr
    assert git(checkout, "log", "--format=%s", f"main..{BRANCH}").splitlines() == [
        "feat: [US-002] - Feature 2",
        "test: [US-002] - Feature 2",
        "feat: [US-001] - Feature 1",
        "test: [US-001] - Feature 1",
    ]
    assert git(checkout, "merge-base", "--is-ancestor", earlier, BRANCH) == ""
    # The stories were measured against the earlier head, and the body does not call it the base.
    body = (tmp_path / "work/runs/third/pr.md").read_text()
    assert f"the stories started from `{earlier[:12]}`" in body
    assert "Every test passed on the starting commit" in body and "the base commit" not in body


def test_discard_removes_branch_worktree_and_folder_and_the_next_run_starts_clean(
    tmp_path: Path, checkout: Path
) -> None:
    failed_after_story_1(tmp_path, checkout)
    work = tmp_path / "work"
    assert (work / "cache/worktrees/first").is_dir()
    # What a killed worker leaves beside the run folder (a run that ends removes them itself).
    beside = ("homes", "gatehomes", "handoff", "gitviews", "bytecode")
    for name in beside:
        (work / name / "first").mkdir(parents=True, exist_ok=True)

    unasked = reqdrive(tmp_path, checkout, "discard", "first")  # no terminal, no --yes
    assert unasked.returncode != 0 and "pass --yes" in unasked.stderr
    assert (work / "runs/first").is_dir() and git(checkout, "branch", "--list", BRANCH)

    done = reqdrive(tmp_path, checkout, "discard", "first", "--yes")

    assert done.returncode == 0, done.stderr
    assert f"deleted branch {BRANCH}" in done.stdout
    assert git(checkout, "branch", "--list", BRANCH) == ""
    assert not (work / "runs/first").exists()
    assert not (work / "cache/worktrees/first").exists()
    assert not list((work / "cache/spares").glob("*/first-*"))
    assert [name for name in beside if (work / name / "first").exists()] == []
    assert reqdrive(tmp_path, checkout, "runs").stdout.strip() == "no runs in this work dir"

    scenario = {"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}}
    again = run(tmp_path, checkout, scenario)
    assert again.returncode == 0, again.stderr
    assert "kept as" not in again.stderr
    assert git(checkout, "rev-list", "--count", f"main..{BRANCH}") == "2"  # test:, then feat:


def test_a_live_run_is_neither_discarded_nor_replaced(tmp_path: Path, checkout: Path) -> None:
    pids = tmp_path / "pids.txt"
    scenario = scenario_file(
        tmp_path,
        {
            "plan": [{"prd": prd(1)}],
            "stories": {"US-001": [{"tests": {"hang": 300, "pids_file": str(pids)}}]},
        },
    )
    live = subprocess.Popen(
        command(tmp_path, scenario, "--run-id", "live"),
        cwd=checkout,
        env=environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: pids.exists() or live.poll() is not None)
        discard = reqdrive(tmp_path, checkout, "discard", "live", "--yes")
        other = run_cli(checkout, command(tmp_path, scenario, "--run-id", "other"))
    finally:
        live.kill()
        live.wait()
        for pid in pids.read_text().split() if pids.exists() else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    assert discard.returncode == 8 and "run live is running" in discard.stderr
    assert (tmp_path / "work/runs/live").is_dir()
    assert other.returncode == 8
    assert f"run live is already running (pid {live.pid}) on branch {BRANCH}" in other.stderr


def test_discard_on_a_terminal_asks_and_no_keeps_the_run(tmp_path: Path, checkout: Path) -> None:
    bad_plan: dict[str, Any] = {"plan": [{"prd": {"userStories": []}}]}
    assert run(tmp_path, checkout, bad_plan, "--run-id", "asked").returncode == 5
    controller, terminal = os.openpty()
    try:
        os.write(controller, b"n\n")
        argv = [str(REQDRIVE), "discard", "asked", "--work-dir", str(tmp_path / "work")]
        done = subprocess.run(
            argv, cwd=checkout, env=environment(), stdin=terminal, capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(controller)
        os.close(terminal)
    assert done.returncode == 7 and "discard run asked (failed)" in done.stdout
    assert "nothing removed" in done.stderr
    assert (tmp_path / "work/runs/asked").is_dir()
    assert (tmp_path / "work/cache/worktrees/asked").is_dir()
