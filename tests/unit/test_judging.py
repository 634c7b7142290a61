"""What a story is judged against, and what its attempts make of it."""

from __future__ import annotations

import pytest

from worker.gates import GateResult, TestStatus
from worker.judging import fail_fast_on, reference_gates, story_state
from worker.state import AttemptOutcome, AttemptRecord, StoryRecord, StoryState


def gate(passed: bool, failed: list[str] | None = None) -> GateResult:
    return GateResult(
        name="tests",
        command="pytest",
        passed=passed,
        exit_code=0 if passed else 1,
        timed_out=False,
        duration_s=0.1,
        tests=None if failed is None else dict.fromkeys(failed, TestStatus.FAILED),
    )


def attempt(iteration: int, outcome: AttemptOutcome, failed: list[str]) -> AttemptRecord:
    return AttemptRecord(
        iteration=iteration, attempt=1, outcome=outcome, gates=[gate(False, failed)]
    )


def story(story_id: str, *attempts: AttemptRecord) -> StoryRecord:
    return StoryRecord(
        id=story_id, title=story_id, priority=1, acceptance_criteria=["x"], attempts=list(attempts)
    )


BASELINE = [gate(False, ["a", "b", "c"])]


def test_before_any_story_is_kept_stories_are_judged_against_the_baseline() -> None:
    rejected = story("US-001", attempt(1, AttemptOutcome.GATES_FAILED, ["a", "b", "c", "x"]))
    assert reference_gates([rejected], BASELINE) == BASELINE


def test_the_latest_kept_attempt_is_the_reference_not_a_later_rejected_one() -> None:
    stories = [
        story("US-001", attempt(1, AttemptOutcome.PASSED, ["b", "c"])),
        story(
            "US-002",
            attempt(2, AttemptOutcome.UNVERIFIED, ["c"]),
            attempt(3, AttemptOutcome.GATES_FAILED, ["a", "c"]),
        ),
    ]
    assert reference_gates(stories, BASELINE) == [gate(False, ["c"])]


def test_gates_stop_at_the_first_failure_only_on_a_green_baseline() -> None:
    assert fail_fast_on([gate(True), gate(True)])
    assert fail_fast_on([])
    assert not fail_fast_on([gate(True), gate(False, None)])


@pytest.mark.parametrize(
    ("outcome", "number", "state"),
    [
        (AttemptOutcome.PASSED, 3, StoryState.PASSED),
        (AttemptOutcome.UNVERIFIED, 1, StoryState.UNVERIFIED),
        (AttemptOutcome.GATES_FAILED, 2, StoryState.PENDING),  # one more try left
        (AttemptOutcome.GATES_FAILED, 3, StoryState.FAILED),
        (AttemptOutcome.AGENT_TIMED_OUT, 3, StoryState.FAILED),
        (AttemptOutcome.NO_CHANGES, 1, StoryState.PENDING),
    ],
)
def test_a_story_fails_for_good_only_when_its_last_allowed_attempt_failed(
    outcome: AttemptOutcome, number: int, state: StoryState
) -> None:
    assert story_state(outcome, number, max_retries=3) is state
