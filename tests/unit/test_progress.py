"""The progress comment: each story's line reads as a person would say it."""

from __future__ import annotations

from bot.github.progress import Progress, next_steps
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


def test_a_run_stopped_before_its_stories_says_to_run_it_again_not_to_retry_them() -> None:
    # A retry resets stories that ended; one never tried (the run stopped at its budget)
    # would give "nothing to retry". `/reqdrive run` takes the run up where it stopped.
    done = _story().model_copy(update={"state": StoryState.PASSED})
    waiting = _story().model_copy(update={"id": "US-002", "state": StoryState.PENDING})
    said = next_steps([done, waiting])
    assert said == "**Next:** comment `/reqdrive run` to go on from US-002, where the run stopped."
    failed = _story()
    assert "`/reqdrive retry US-001`" in next_steps([failed, waiting])
