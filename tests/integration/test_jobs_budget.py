"""Budgets through the App: a run job whose agent (Claude Code's result line, from a stand-in
CLI) reports its cost stops at budgetUsd or the installation's monthly budget, and says so in
its progress comment, check run and draft pull request; /reqdrive status shows the spend."""

from __future__ import annotations

import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from bot.jobs import runtime
from bot.ops.settings import load_settings
from bot.requests import JobKind
from bot.stores.spend import SpendStore
from tests.integration.test_jobs import REPO, Scene, progress_comments
from tests.integration.test_pipeline import ONE_CALL, git, implement, prd, project_factory
from tests.support.github_http import API, FakeGitHub, private_key_pem

PRICED_CLAUDE = Path(__file__).resolve().parents[1] / "support/fake_agents/priced_claude.py"
COST_PER_CALL = 0.3


def budget_scene(
    tmp_path: Path,
    fake_github: FakeGitHub,
    redis_conn: redis.Redis,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    *,
    config: dict[str, Any],
    monthly_usd: float | None = None,
) -> Scene:
    """test_jobs' scene with the `claude` runner: a `claude` on PATH runs the scripted agent
    and ends with a result line reporting COST_PER_CALL."""
    # Budgets are counted per agent call: one per story attempt here (tests: together).
    project = project_factory(tmp_path, ONE_CALL)(
        config={"agent": {"runner": "claude", "timeout": 60}, **config}
    )
    scenario = tmp_path / "scenario.json"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "claude"
    shim.write_text(
        f"#!/bin/sh\nexec {sys.executable} {PRICED_CLAUDE} --scenario {scenario} "
        f'--cost {COST_PER_CALL} "$@"\n'
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    head = git(project.remote, "rev-parse", "main")
    source = tmp_path / "source"
    fake_github.add_repo(REPO, str(project.remote))
    fake_github.branch_heads[(REPO, "main")] = head
    for ref in ("main", head):
        fake_github.set_file(
            REPO, ref, ".github/reqdrive.yml", (source / ".github/reqdrive.yml").read_text()
        )
    fake_github.set_role(REPO, "alice", "write")
    settings = load_settings(
        github_webhook_secret="test-secret",
        github_app_id=42,
        github_private_key=private_key_pem(),
        github_api_url=API,
        redis_url=redis_url,
        reqdrive_queue="reqdrive-test",
        reqdrive_work_dir=project.work_dir,
        reqdrive_github_request_interval_s=0,
        reqdrive_github_write_interval_s=0,
        reqdrive_sandbox="off",
        reqdrive_monthly_budget_usd=monthly_usd,
    )
    sleeps: list[float] = []
    runtime.configure(settings, redis_conn, sleep=sleeps.append)
    return Scene(fake_github, redis_conn, project.remote, tmp_path, project, sleeps)


def three_stories() -> dict[str, Any]:
    return {
        "plan": [{"prd": prd(3)}],
        "stories": {f"US-00{n}": [implement(n)] for n in (1, 2, 3)},
    }


def test_a_half_dollar_budget_stops_the_run_and_the_comment_check_and_draft_say_so(
    tmp_path: Path,
    fake_github: FakeGitHub,
    redis_conn: redis.Redis,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scene = budget_scene(
        tmp_path, fake_github, redis_conn, redis_url, monkeypatch, config={"budgetUsd": 0.5}
    )
    gh = scene.gh
    issue = gh.add_issue(REPO, "Features", "Build features one to three.")
    scene.scenario(three_stories())

    scene.enqueue(JobKind.RUN, requirement=f"ISSUE-{issue}", issue_number=issue)
    scene.work()

    # plan $0.30, US-001 $0.60: the budget is reached, US-002 never starts.
    assert scene.project.calls() == ["plan 1", "US-001 1"]
    [comment] = progress_comments(gh, issue)
    assert "budget reached (the run's budgetUsd)" in comment["body"]
    [pull] = gh.pulls_of(REPO)
    assert pull["draft"] is True
    assert "Stopped because: budget reached (the run's budgetUsd)." in pull["body"]
    head = git(scene.remote, "rev-parse", pull["head"]["ref"])
    assert git(scene.remote, "log", "--format=%s", f"main..{head}") == "feat: [US-001] - Feature 1"
    [check] = [r for r in gh.check_runs_of(REPO) if r["head_sha"] == head]
    assert check["conclusion"] == "action_required"
    assert "budget reached" in check["output"]["summary"]
    record = scene.records().for_source(REPO, f"ISSUE-{issue}")
    assert record is not None
    assert SpendStore(redis_conn).month(7) == {
        "total": pytest.approx(0.6),
        record.run_id: pytest.approx(0.6),
    }

    scene.enqueue(JobKind.STATUS, requirement=f"ISSUE-{issue}", issue_number=issue, comment_id=9)
    scene.work()
    [reply] = [c["body"] for c in gh.comments_on(REPO, issue) if "reqdrive:reply" in c["body"]]
    assert "Agent spend: this run $0.60; this installation $0.60 in " in reply


def test_the_installations_monthly_budget_spent_by_other_runs_stops_this_one(
    tmp_path: Path,
    fake_github: FakeGitHub,
    redis_conn: redis.Redis,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scene = budget_scene(
        tmp_path, fake_github, redis_conn, redis_url, monkeypatch, config={}, monthly_usd=1.0
    )
    gh = scene.gh
    SpendStore(redis_conn).charge(7, "another-run", 0.5)  # another repository's run, this month
    SpendStore(redis_conn).charge(8, "other-installation", 9.0)  # not this installation's
    issue = gh.add_issue(REPO, "Features", "Build features one to three.")
    scene.scenario(three_stories())

    scene.enqueue(JobKind.RUN, requirement=f"ISSUE-{issue}", issue_number=issue)
    scene.work()

    # $0.50 + plan 0.30 + US-001 0.30 = $1.10: US-002 never starts.
    assert scene.project.calls() == ["plan 1", "US-001 1"]
    [pull] = gh.pulls_of(REPO)
    assert pull["draft"] is True
    assert "budget reached (the installation's monthly budget)" in pull["body"]
    [comment] = progress_comments(gh, issue)
    assert "budget reached (the installation's monthly budget)" in comment["body"]
    assert SpendStore(redis_conn).total(7) == pytest.approx(1.1)

    # The next run of the installation this month starts no agent call at all.
    second = gh.add_issue(REPO, "More", "Build feature one.")
    scene.enqueue(JobKind.RUN, requirement=f"ISSUE-{second}", issue_number=second)
    scene.work()
    assert scene.project.calls() == ["plan 1", "US-001 1"]
    [stopped] = progress_comments(gh, second)
    assert (
        "Stopped at the plan step: budget reached: this installation's agent calls"
        in (stopped["body"])
    )
