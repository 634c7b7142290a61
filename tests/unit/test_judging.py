"""What a story is judged against, and what its attempts make of it."""

from __future__ import annotations

import pytest

from worker.model.gates import GateResult, TestStatus
from worker.model.state import AttemptOutcome, AttemptRecord, StoryRecord, StoryState
from worker.verdict.judging import (
    Verdict,
    fail_fast_on,
    feedback,
    judge_story,
    reference_gates,
    story_state,
)


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


# Fail-to-pass and pass-to-pass, per test id -------------------------------------------------


def results(**tests: TestStatus) -> list[GateResult]:
    failed = any(status is TestStatus.FAILED for status in tests.values())
    return [
        GateResult(
            name="tests",
            command="pytest",
            passed=not failed,
            exit_code=1 if failed else 0,
            timed_out=False,
            duration_s=0.1,
            tests=tests,
        )
    ]


P, F, S = TestStatus.PASSED, TestStatus.FAILED, TestStatus.SKIPPED


@pytest.mark.parametrize(
    ("before", "after", "owned", "at_parent", "rewritten", "verdict", "reason"),
    [
        # Its own test turns green, the others stay green: a pass.
        ({"own": F, "old": P}, {"own": P, "old": P}, {"own"}, {}, (), Verdict.PASSED, ""),
        # Its own test still fails, though it broke nothing.
        (
            {"own": F, "old": P},
            {"own": F, "old": P},
            {"own"},
            {},
            (),
            Verdict.FAILED,
            "own still fails",
        ),
        # It broke a test that passed before.
        (
            {"own": F, "old": P},
            {"own": P, "old": F},
            {"own"},
            {},
            (),
            Verdict.FAILED,
            "old fails now; it passed before the story",
        ),
        # Deleted, deselected or skipped: never a pass on that test.
        ({"old": P}, {}, set(), {}, (), Verdict.FAILED, "old was deleted or deselected"),
        ({"old": P}, {"old": S}, set(), {}, (), Verdict.FAILED, "old is skipped"),
        # SWE-bench's rule for fail-to-pass tests: skipped or missing counts as failed.
        ({"own": F}, {"own": S}, {"own"}, {}, (), Verdict.FAILED, "own is skipped"),
        ({"own": S}, {"own": S}, {"own"}, {}, (), Verdict.FAILED, "own is skipped"),
        ({"own": F}, {}, {"own"}, {}, (), Verdict.FAILED, "own was deleted or deselected"),
        ({}, {"old": P}, {"own"}, {}, (), Verdict.FAILED, "own did not run"),
        # Rewritten to pass: reported, and not a pass either.
        (
            {"own": F},
            {"own": P},
            {"own"},
            {},
            ("own",),
            Verdict.FAILED,
            "own was rewritten by the story (a test must not be changed to pass)",
        ),
        # A test it added must fail without the change.
        ({"old": P}, {"old": P, "new": P}, {"new"}, {"new": "failed"}, (), Verdict.PASSED, ""),
        (
            {"old": P},
            {"old": P, "new": P},
            {"new"},
            {"new": "passed"},
            (),
            Verdict.FAILED,
            "new passes without the story's change too, so it proves nothing",
        ),
        # A failure that was there before and is no one's to fix does not hold it back.
        ({"other": F}, {"other": F}, set(), {}, (), Verdict.PASSED, ""),
        # ...but deleting or skipping it would make the final check green unfixed.
        ({"other": F}, {}, set(), {}, (), Verdict.FAILED, "other was deleted or deselected"),
        ({"other": F}, {"other": S}, set(), {}, (), Verdict.FAILED, "other is skipped"),
        # Rewriting another story's failing test is not this story's to do either.
        (
            {"other": F},
            {"other": P},
            set(),
            {},
            ("other",),
            Verdict.FAILED,
            "other was rewritten by the story (a test must not be changed to pass)",
        ),
    ],
)
def test_a_story_is_judged_per_test_id(
    before: dict[str, TestStatus],
    after: dict[str, TestStatus],
    owned: set[str],
    at_parent: dict[str, str],
    rewritten: tuple[str, ...],
    verdict: Verdict,
    reason: str,
) -> None:
    judged = judge_story(
        results(**before),
        results(**after),
        ["tests"],
        owned=owned,
        at_parent=at_parent,
        rewritten=rewritten,
    )
    assert (judged.verdict, judged.reason) == (verdict, reason)


def test_per_test_results_lost_after_the_story_mean_its_tests_did_not_run() -> None:
    # A gate script replaced with `exit 0`: green, but no test ran.
    exit_0 = results()[0].model_copy(update={"tests": None})
    judged = judge_story(results(own=F, old=P), [exit_0], ["tests"], owned={"own"})
    assert judged.verdict is Verdict.FAILED
    assert judged.reason == "old was deleted or deselected; own was deleted or deselected"


def test_the_next_attempt_is_told_each_failing_test_with_its_output() -> None:
    gates = [
        results(own=F)[0].model_copy(update={"failures": {"own": "assert 3 == 2"}}),
    ]
    judged = judge_story(results(own=F), gates, ["tests"], owned={"own"})
    attempt = AttemptRecord(
        iteration=1,
        attempt=1,
        outcome=AttemptOutcome.GATES_FAILED,
        reason=judged.reason,
        gates=gates,
        tests=judged.tests,
    )
    assert feedback(attempt) == "own still fails\n\nown still fails\nassert 3 == 2"


def test_a_gate_turned_red_with_no_failing_test_is_not_a_pass() -> None:
    # pytest's exit code for a coverage floor or an internal error: every test passed.
    red = results(own=P)[0].model_copy(update={"passed": False, "exit_code": 3})
    judged = judge_story(results(own=F), [red], ["tests"], owned={"own"})
    assert (judged.verdict, judged.reason) == (
        Verdict.FAILED,
        "gate tests failed, though no test failed (see its output)",
    )
    # Red before for the same reason (no tests at all: exit 5): not held against the story.
    empty = results()[0].model_copy(update={"passed": False, "exit_code": 5})
    assert judge_story([empty], [empty], ["tests"]).verdict is Verdict.PASSED


def test_verdicts_are_ordered_from_passed_to_failed() -> None:
    assert Verdict.FAILED.worse_than(Verdict.UNVERIFIED)
    assert Verdict.UNVERIFIED.worse_than(Verdict.PASSED)
    assert not Verdict.UNVERIFIED.worse_than(Verdict.UNVERIFIED)
