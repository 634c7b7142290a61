"""The console reporter: one line per event, as `reqdrive run` prints it."""

from __future__ import annotations

import io

from tests.support.run_results import gate, result, story
from worker.model.state import AttemptOutcome, AttemptRecord, StoryState
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
