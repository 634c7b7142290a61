"""Failed tests become annotations only where their line is known, each place once."""

from __future__ import annotations

from bot.github.annotations import (
    annotation_key,
    failure_annotations,
    left_out_note,
    story_failures,
)
from worker.model.gates import FailureSite, GateResult, TestStatus
from worker.model.state import AttemptOutcome, AttemptRecord, StoryRecord, StoryState


def gate(
    name: str, tests: dict[str, TestStatus] | None, sites: dict[str, FailureSite]
) -> GateResult:
    return GateResult(name=name, command="x", passed=False, exit_code=1, timed_out=False,
                      duration_s=0.0, tests=tests, failure_sites=sites)  # fmt: skip


def test_only_failed_tests_with_a_known_line_are_annotated_once() -> None:
    site = FailureSite(path="tests/test_a.py", line=7, message="")
    tests = {"a::failed": TestStatus.FAILED, "a::passed": TestStatus.PASSED,
             "a::nowhere": TestStatus.FAILED}  # fmt: skip
    sites = {"a::failed": site, "a::passed": site}  # a passing test's site is never shown
    first = gate("tests", tests, sites)

    annotations = failure_annotations([first, first.model_copy(update={"name": "again"})])

    assert annotations == [{
        "path": "tests/test_a.py", "start_line": 7, "end_line": 7,
        "annotation_level": "failure", "title": "a::failed", "message": "tests failed",
    }]  # fmt: skip
    assert annotation_key(annotations[0]) == "tests/test_a.py:7:a::failed"


def test_a_gate_without_per_test_results_gives_no_annotation() -> None:
    assert failure_annotations([gate("lint", None, {})]) == []


def test_story_failures_are_the_last_attempt_of_each_failed_story() -> None:
    broken = gate("tests", {"t": TestStatus.FAILED}, {})
    old = gate("old", {"t": TestStatus.FAILED}, {})

    def story(state: StoryState, *gates: GateResult) -> StoryRecord:
        attempts = [AttemptRecord(iteration=n, attempt=n, outcome=AttemptOutcome.GATES_FAILED,
                                  gates=[g]) for n, g in enumerate(gates, 1)]  # fmt: skip
        return StoryRecord(id="US-1", title="t", priority=1, acceptance_criteria=["a"],
                           state=state, attempts=attempts)  # fmt: skip

    stories = [story(StoryState.FAILED, old, broken), story(StoryState.PASSED, broken)]
    assert story_failures(stories) == [broken]


def test_the_note_counts_what_was_left_out() -> None:
    assert left_out_note(0) == ""
    assert left_out_note(1).startswith("_1 more failing test with")
    assert "at most 50 per check run" in left_out_note(7)
