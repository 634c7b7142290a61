"""Limits, resume from a checkpoint (file or Redis), and refusing a branch changed behind a run."""

from __future__ import annotations

import fcntl
import io
import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from bot.stores.checkpoints import RedisCheckpointStore
from tests.integration.test_pipeline import (
    PYTEST,
    MakeProject,
    Project,
    git,
    implement,
    prd,
    project_factory,
    story_commits,
)
from tests.support.processes import running
from worker.agents.base import AgentCall, AgentOutcome, AgentSettings
from worker.agents.command import CommandRunner
from worker.confine.redact import Redactor
from worker.exceptions import PreflightError, ResumeError, RunCancelled
from worker.model.state import Checkpoint, RunResult, StopReason, StoryState
from worker.report.console import ConsoleReporter
from worker.run.checkpoint_file import FileCheckpointStore
from worker.run.pipeline import Pipeline

BRANCH = "reqdrive/req-001-demo"


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


class PricedRunner:
    """The command runner, reporting a fixed cost per call as Claude Code's result line does."""

    name = "priced"

    def __init__(self, command: str, cost_usd: float) -> None:
        settings = AgentSettings(runner="command", command=command, timeout_s=60)
        self._runner = CommandRunner(settings, redactor=Redactor(), source_env=os.environ)
        self._cost = cost_usd

    def run(self, call: AgentCall, *, cancel: threading.Event | None = None) -> AgentOutcome:
        return replace(self._runner.run(call, cancel=cancel), cost_usd=self._cost)


def four_stories(project: Project) -> Path:
    return project.scenario(
        {
            "plan": [{"prd": prd(4)}],
            "stories": {f"US-00{n}": [implement(n)] for n in range(1, 5)},
        }
    )


def test_max_iterations_stops_the_loop_and_leaves_a_draft_naming_the_untried_stories(
    make_project: MakeProject,
) -> None:
    project = make_project({"maxIterations": 2})
    result = project.run(four_stories(project))
    assert result.stop_reason is StopReason.MAX_ITERATIONS
    assert [s.state for s in result.stories] == [StoryState.PASSED] * 2 + [StoryState.PENDING] * 2
    assert result.draft_reason == (
        "2 of 4 stories did not pass: US-003 (pending), US-004 (pending)"
    )
    assert "Stopped because: maxIterations reached." in (project.run_dir() / "pr.md").read_text()


def test_the_budget_stops_the_loop_once_the_agents_reported_cost_reaches_it(
    make_project: MakeProject,
) -> None:
    project = make_project({"budgetUsd": 1.0})
    scenario = four_stories(project)
    spec = project.spec(scenario)
    runner = PricedRunner(project.agent_command(scenario), cost_usd=0.4)
    pipeline = Pipeline(
        spec,
        reporter=ConsoleReporter(io.StringIO()),
        checkpoints=FileCheckpointStore(project.work_dir / "runs"),
        runner=runner,
    )
    result = pipeline.run()
    # Each call costs 0.4: plan 0.4, then US-001's tests call 0.8 and its implement call 1.2:
    # spent, so US-002 is never started.
    assert result.stop_reason is StopReason.BUDGET_SPENT
    assert project.calls() == ["plan 1", "US-001 1 tests", "US-001 1"]
    assert result.cost_usd == pytest.approx(1.2)
    assert "$1.20" in (project.run_dir() / "pr.md").read_text()


def test_a_resumed_run_pushes_the_checkpointed_commit_an_interrupted_push_missed(
    make_project: MakeProject,
) -> None:
    project = make_project({"maxIterations": 1})
    scenario = four_stories(project)
    first = project.run(scenario)
    # As if the worker died between its checkpoint and its push.
    git(project.remote, "update-ref", f"refs/heads/{BRANCH}", first.base_sha)
    second = project.run(scenario)
    assert git(project.remote, "rev-parse", BRANCH) == first.head_sha == second.head_sha
    assert project.calls() == ["plan 1", "US-001 1 tests", "US-001 1"]  # nothing re-done


def test_resuming_refuses_a_branch_that_was_changed_outside_the_run(
    make_project: MakeProject, tmp_path: Path
) -> None:
    project = make_project({"maxIterations": 1})
    scenario = four_stories(project)
    first = project.run(scenario)
    other = tmp_path / "someone-else"
    git(tmp_path, "clone", "-q", "-b", BRANCH, str(project.remote), str(other))
    (other / "manual.txt").write_text("a human commit\n")
    git(other, "add", "-A")
    git(other, "commit", "-qm", "manual change")
    git(other, "push", "-q", "origin", BRANCH)

    with pytest.raises(ResumeError) as caught:
        project.run(scenario)
    message = str(caught.value)
    assert f"branch {BRANCH} is at" in message and first.head_sha[:12] in message
    assert "changed outside this run" in message


def test_a_checkpoint_in_redis_resumes_without_redoing_passed_stories(
    make_project: MakeProject, redis_conn: redis.Redis
) -> None:
    project = make_project()
    scenario = four_stories(project)
    store = RedisCheckpointStore(redis_conn)
    spec = project.spec(scenario)
    first = Pipeline(spec, reporter=ConsoleReporter(io.StringIO()), checkpoints=store).run()
    saved = store.load("run-1")
    assert isinstance(saved, Checkpoint)
    assert saved.head_sha == first.head_sha
    assert [s.state for s in saved.stories] == [StoryState.PASSED] * 4
    assert redis_conn.ttl("reqdrive:checkpoint:run-1") > 0

    again = Pipeline(spec, reporter=ConsoleReporter(io.StringIO()), checkpoints=store).run()
    assert project.calls().count("plan 1") == 1 and len(project.calls()) == 9
    assert again.head_sha == first.head_sha and again.ready
    assert len(project.branch_log()) == 8  # each story's frozen tests, then its code


def test_cancelling_stops_before_the_next_story_and_leaves_a_draft(
    make_project: MakeProject,
) -> None:
    project = make_project()
    scenario = four_stories(project)
    cancel = threading.Event()

    # Reporters hear of events on a thread of their own, later; the checkpoint is saved in the
    # story loop itself, so cancelling there is deterministic.
    class CancelAfterFirstStory(FileCheckpointStore):
        def save(self, checkpoint: Checkpoint) -> None:
            super().save(checkpoint)
            if any(s.state is StoryState.PASSED for s in checkpoint.stories):
                cancel.set()

    pipeline = Pipeline(
        project.spec(scenario),
        reporter=ConsoleReporter(io.StringIO()),
        checkpoints=CancelAfterFirstStory(project.work_dir / "runs"),
        cancel=cancel,
    )
    result = pipeline.run()
    assert result.stop_reason is StopReason.CANCELLED
    assert project.calls() == ["plan 1", "US-001 1 tests", "US-001 1"]
    assert project.branch_log() == story_commits(1)
    assert (result.ready, result.draft_reason) == (False, "the run was cancelled")


def test_a_second_run_with_the_same_id_is_refused_while_the_first_holds_it(
    make_project: MakeProject,
) -> None:
    project = make_project()
    scenario = four_stories(project)
    run_dir = project.run_dir()
    run_dir.mkdir(parents=True)
    with (run_dir / ".lock").open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("4242\n")
        held.flush()
        with pytest.raises(PreflightError, match=r"run run-1 is already running \(pid 4242\)"):
            project.run(scenario)
    assert project.calls() == []
    assert project.run(scenario).ready  # once it is free, the run goes ahead


def test_a_changed_requirement_needs_a_new_run_which_builds_on_the_same_branch(
    make_project: MakeProject,
) -> None:
    project = make_project({"maxIterations": 1})
    scenario = four_stories(project)
    first = project.run(scenario)
    changed = replace(project.spec(scenario).requirement, text="# REQ-001\nNow five features.\n")
    with pytest.raises(PreflightError, match="the requirement changed since run run-1"):
        project.run(scenario, requirement=changed)

    five = project.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(5)]}})
    second = project.run(five, requirement=changed, run_id="run-2")
    # The finished run gave the branch up; the new run starts from where it ended.
    assert project.branch_log() == story_commits(1) * 2
    assert git(project.remote, "rev-parse", f"{BRANCH}~2") == first.head_sha
    assert git(project.remote, "rev-parse", BRANCH) == second.head_sha


def run_cancelled_once(project: Project, scenario: Path, *, when: Path) -> RunResult:
    """Run, cancelling from another thread (as Ctrl-C would) once `when` exists."""
    cancel = threading.Event()

    def cancel_once_there() -> None:
        while not when.exists():
            time.sleep(0.05)
        cancel.set()

    threading.Thread(target=cancel_once_there, daemon=True).start()
    pipeline = Pipeline(
        project.spec(scenario),
        reporter=ConsoleReporter(io.StringIO()),
        checkpoints=FileCheckpointStore(project.work_dir / "runs"),
        cancel=cancel,
    )
    return pipeline.run()


def test_cancelling_mid_agent_stops_it_and_the_attempt_is_not_counted(
    make_project: MakeProject,
) -> None:
    project = make_project()
    pids = project.tmp / "pids.txt"
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(2)}],
            "stories": {
                "US-001": [implement(1)],
                # Its tests are frozen; its implement call hangs until cancelled.
                "US-002": [
                    {
                        "tests": {
                            "write": {"tests/test_feature_2.py": "def test_2():\n    1 / 0\n"}
                        },
                        "implement": {
                            "write": {"partial.py": "x\n"},
                            "hang": 300,
                            "pids_file": str(pids),
                        },
                    }
                ],
            },
        }
    )
    result = run_cancelled_once(project, scenario, when=pids)  # US-002's agent hangs
    assert result.stop_reason is StopReason.CANCELLED
    second = result.stories[1]
    assert (second.state, second.attempts) == (StoryState.PENDING, [])
    assert not any(running(int(pid)) for pid in pids.read_text().split())
    assert "partial.py" not in project.branch_files()
    assert "US-002 attempt 1: cancelled" in (project.run_dir() / "progress.txt").read_text()


def test_a_baseline_cancelled_part_way_is_measured_again_when_the_run_resumes(
    make_project: MakeProject, tmp_path: Path
) -> None:
    hung = tmp_path / "baseline-hung"
    # The first baseline hangs until cancelled; every later run of the gate is the real tests.
    tests = f"if [ ! -e {hung} ]; then touch {hung}; sleep 300; fi; {PYTEST}"
    project = make_project({"testCommand": tests})
    scenario = project.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    # Planning needs the baseline's failing tests: a run cancelled before it has no plan.
    with pytest.raises(RunCancelled, match="while measuring the base commit"):
        run_cancelled_once(project, scenario, when=hung)

    second = project.run(scenario)
    # A gate stopped by the cancel is not "the tests fail on the base commit".
    assert [(g.name, g.passed) for g in second.baseline_gates] == [("tests", True)]
    progress = (project.run_dir() / "progress.txt").read_text()  # the story prompt's progress
    assert "baseline on the base commit: tests passes" in progress and "FAILS" not in progress
    assert second.stories[0].state is StoryState.PASSED and second.ready


def test_a_forged_checkpoint_claiming_every_story_passed_is_checked_against_the_branch(
    make_project: MakeProject,
) -> None:
    project = make_project({"maxIterations": 1})
    scenario = project.scenario(
        {"plan": [{"prd": prd(2)}], "stories": {"US-001": [implement(1)], "US-002": [implement(2)]}}
    )
    first = project.run(scenario)
    assert first.stop_reason is StopReason.MAX_ITERATIONS
    # Rewritten as the agent of issue 7 did: everything passed, the loop done, no commit.
    store = FileCheckpointStore(project.work_dir / "runs")
    forged = store.load("run-1")
    assert forged is not None
    forged.stories[1].state = StoryState.PASSED
    forged.iteration = 0
    forged.stop_reason = StopReason.ALL_STORIES_PASSED
    store.save(forged)

    second = project.run(scenario)

    assert project.calls()[-1] == "US-002 1"  # the claim was not believed: US-002 ran
    assert project.branch_log() == story_commits(1, 2)
    assert [s.state for s in second.stories] == [StoryState.PASSED] * 2
    assert "holds no commit for them" in (project.run_dir() / "progress.txt").read_text()
    body = git(project.remote, "log", "-1", "--format=%B", BRANCH)
    assert "Reqdrive-Story: US-002" in body
