"""The console reporter: one line per event, as `reqdrive run` prints it."""

from __future__ import annotations

import io
import re
import time

from tests.support.run_results import gate, result, story
from worker.model.gates import GateResult, GateSpec, TestStatus
from worker.model.state import AttemptOutcome, AttemptRecord, RunStep, StopReason, StoryState
from worker.report.console import ConsoleReporter


def test_the_console_reporter_prints_each_story_as_it_finishes() -> None:
    out = io.StringIO()
    reporter = ConsoleReporter(out)
    record = story("US-002", StoryState.PENDING)
    reporter.story_started(record, 1, 3)
    attempt = AttemptRecord(
        iteration=3,
        attempt=1,
        outcome=AttemptOutcome.GATES_FAILED,
        reason="gate tests failed",
        gates=[gate("tests", False)],
    )
    reporter.story_finished(record, attempt)
    reporter.run_finished(result(ready=False, draft_reason="x", run_dir="/r"))
    lines = out.getvalue().splitlines()
    assert lines[0] == "→ US-002 attempt 1 (iteration 3): Title of US-002"
    assert (
        "US-002 attempt 1 gates failed: gate tests failed [tests FAILED] → story pending"
        in lines[1]
    )
    assert "done: 2 stories: 2 passed;" in lines[2] and "draft: x" in lines[2]


def test_the_console_counts_one_planned_story_as_one_story() -> None:
    out = io.StringIO()
    reporter = ConsoleReporter(out)
    reporter.plan_ready([story("US-001", StoryState.PENDING)])
    reporter.plan_ready([story("US-001", StoryState.PENDING), story("US-002", StoryState.PENDING)])
    assert [line for line in out.getvalue().splitlines() if line.startswith("plan:")] == [
        "plan: 1 story",
        "plan: 2 stories",
    ]


def story_line(outcome: AttemptOutcome, reason: str, gates: list[GateResult]) -> str:
    out = io.StringIO()
    state = StoryState.PASSED if outcome is AttemptOutcome.PASSED else StoryState.FAILED
    record = story("US-001", state)
    attempt = AttemptRecord(iteration=1, attempt=1, outcome=outcome, reason=reason, gates=gates)
    ConsoleReporter(out).story_finished(record, attempt)
    return out.getvalue().strip()


def test_a_failed_gate_beside_a_passed_story_says_it_failed_before_the_story_too() -> None:
    line = story_line(
        AttemptOutcome.PASSED,
        "",
        [gate("tests", False, failed=["tests/test_old.py::test_broken"]), gate("lint", True)],
    )
    assert line == (
        "US-001 attempt 1 passed [tests failed as before this story (1 failing test not its "
        "own), lint ok] → story passed (0.0s)"
    )
    assert "FAILED" not in line


def test_an_outcome_whose_reason_repeats_it_is_said_once() -> None:
    line = story_line(AttemptOutcome.NO_CHANGES, "no changes", [])
    assert line == "US-001 attempt 1 no changes → story failed (0.0s)"
    line = story_line(AttemptOutcome.NO_CHANGES, "no changes outside forbidden paths", [])
    assert "attempt 1 no changes outside forbidden paths → story" in line


def test_a_plan_only_run_ends_with_the_plan_not_a_cancellation() -> None:
    out = io.StringIO()
    cancelled = result(
        ready=False, draft_reason="the run was cancelled", stop_reason=StopReason.CANCELLED
    )
    ConsoleReporter(out, plan_only=True).run_finished(cancelled)
    assert out.getvalue() == "planned: 2 stories; no story was run\n"


def test_each_step_agent_call_and_gate_run_gets_a_line_with_the_time_since_the_start() -> None:
    out = io.StringIO()
    now = [100.0]
    reporter = ConsoleReporter(out, clock=lambda: now[0])
    tests = GateSpec(name="tests", command="python -m pytest -q")
    reporter.step_started(RunStep.BASELINE)
    now[0] = 114.0
    reporter.gates_started("baseline", [tests])
    now[0] = 127.0
    statuses = {"t::a": TestStatus.FAILED, "t::b": TestStatus.PASSED, "t::c": TestStatus.PASSED}
    baseline = gate("tests", False).model_copy(update={"tests": statuses})
    reporter.gates_finished("baseline", [baseline], 13.24)
    reporter.agent_started("plan-1")
    now[0] = 160.0
    reporter.agent_finished("plan-1", 33.0, "exit 0")
    reporter.story_started(story("US-001", StoryState.PENDING), 2, 3)
    reporter.agent_started("3")
    reporter.gates_started("iteration-3", [tests])
    reporter.gates_finished("iteration-3.parent", [gate("tests", True)], 1.0)
    now[0] = 100 + 3723.0
    reporter.step_started(RunStep.VERIFY)
    reporter.gates_finished("verification", [gate("tests", False)], 2.0)
    assert out.getvalue().splitlines() == [
        "[0:00] baseline: measuring the base commit",
        "[0:14] baseline: running tests (python -m pytest -q) …",
        "[0:27] baseline: tests: 3 tests, 1 failing (13.2 s)",
        "[0:27] plan (attempt 1): agent working …",
        "[1:00] plan (attempt 1): agent done, exit 0 (33.0 s)",
        "→ US-001 attempt 2 (iteration 3): Title of US-001",
        "[1:00] US-001 attempt 2: agent working …",
        "[1:00] US-001 attempt 2: running tests (python -m pytest -q) …",
        "[1:00] US-001 attempt 2, its new tests on the parent (must fail): tests passed (1.0 s)",
        "[1:02:03] verify: checking the final branch",
        "[1:02:03] verify: tests FAILED (exit 1) (2.0 s)",
    ]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_running_line_counts_its_seconds_until_its_end_replaces_it() -> None:
    out = Terminal()
    reporter = ConsoleReporter(out)
    reporter.gates_started("baseline", [GateSpec(name="tests", command="pytest")])
    deadline = time.monotonic() + 10
    while "\r\x1b[K[0:0" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.05)
    reporter.gates_finished("baseline", [gate("tests", True)], 1.2)
    shown = out.getvalue()
    assert shown.startswith("[0:00] baseline: running tests (pytest) …\r\x1b[K")
    assert re.search(r"\r\x1b\[K\[0:00\] baseline: running tests \(pytest\) … \ds", shown)
    assert re.search(r"\r\x1b\[K\[0:0\d\] baseline: tests passed \(1.2 s\)\n$", shown)


def test_reruns_and_results_not_measured_again_say_what_they_are() -> None:
    out = io.StringIO()
    reporter = ConsoleReporter(out)
    reporter.gates_finished("baseline.cached", [gate("tests", True)], 0.0)
    reporter.story_started(story("US-001", StoryState.PENDING), 1, 1)
    for label in ("iteration-1.rerun1", "iteration-1.parent.rerun2"):
        reporter.gates_finished(label, [gate("tests", True)], 1.0)
    reporter.gates_finished("verification.reused", [gate("tests", True)], 0.0)
    lines = [line.split("] ", 1)[-1] for line in out.getvalue().splitlines()]
    assert lines == [
        "baseline (from the cache: an earlier run measured this tree): tests passed (0.0 s)",
        "→ US-001 attempt 1 (iteration 1): Title of US-001",
        "US-001 attempt 1, a failing test run again with its change (1 of 2): tests passed (1.0 s)",
        "US-001 attempt 1, a failing test run again without its change (2 of 2): tests passed "
        "(1.0 s)",
        "verify (not run again: this commit was judged with these checks): tests passed (0.0 s)",
    ]
