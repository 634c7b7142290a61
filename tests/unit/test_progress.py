"""The progress comment: each story's line reads as a person would say it."""

from __future__ import annotations

from bot.github.progress import Progress
from worker.model.state import AttemptOutcome, AttemptRecord, StoryRecord, StoryState, TestCheck


def _story(*outcomes: tuple[AttemptOutcome, str]) -> StoryRecord:
    attempts = [
        AttemptRecord(iteration=1, attempt=n, outcome=outcome, reason=reason, duration_s=5.0)
        for n, (outcome, reason) in enumerate(outcomes, start=1)
    ]
    return StoryRecord(
        id="US-001",
        title="Export",
        priority=1,
        acceptance_criteria=["a"],
        state=StoryState.FAILED,
        attempts=attempts,
    )


def test_one_attempt_is_counted_in_the_singular() -> None:
    story = _story((AttemptOutcome.GATES_FAILED, "t1 still fails"))
    line = Progress("REQ-1.md", "reqdrive/x", stories=[story]).checklist()
    assert "(1 attempt, 5s, $0.00)" in line
    assert "- last attempt: gates failed: t1 still fails" in line


def test_two_attempts_are_counted_in_the_plural() -> None:
    story = _story((AttemptOutcome.NO_CHANGES, ""), (AttemptOutcome.NO_CHANGES, ""))
    line = Progress("REQ-1.md", "reqdrive/x", stories=[story]).checklist()
    assert "(2 attempts, 10s, $0.00)" in line
    assert line.endswith("- last attempt: no changes")


def test_a_reason_that_repeats_the_outcome_is_said_once() -> None:
    story = _story((AttemptOutcome.NO_CHANGES, "no changes outside forbidden paths"))
    line = Progress("REQ-1.md", "reqdrive/x", stories=[story]).checklist()
    assert "- last attempt: no changes outside forbidden paths" in line
    assert "no changes: no changes" not in line


def test_a_flaky_test_is_named_on_its_story_line() -> None:
    # The check run's summary is this checklist: flaky tests show there too.
    flaky = TestCheck(id="t::clock", before="passed", after="failed", flaky=True)
    story = _story((AttemptOutcome.PASSED, "")).model_copy(update={"state": StoryState.PASSED})
    story.attempts[0].tests = [flaky]
    line = Progress("REQ-1.md", "reqdrive/x", stories=[story]).checklist()
    assert line.endswith("- flaky, kept out of the verdict: `t::clock`")
