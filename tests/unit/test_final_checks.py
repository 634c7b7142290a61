"""The final checks: a head already judged with the same gates is not judged again."""

from __future__ import annotations

from tests.support.run_results import gate, story
from worker.model.gates import GateResult, GateSpec
from worker.model.state import AttemptOutcome, AttemptRecord, Checkpoint, StoryState
from worker.run.delivery import judged_results

HEAD, BASE = "c" * 40, "b" * 40
GATES = [GateSpec(name="tests", command="run tests"), GateSpec(name="lint", command="run lint")]
JUDGED = [gate("tests", True), gate("lint", True)]


def checkpoint(*attempts: AttemptRecord, head: str = HEAD) -> Checkpoint:
    record = story("US-001", StoryState.PASSED).model_copy(update={"attempts": list(attempts)})
    return Checkpoint(
        run_id="run-1",
        requirement_source="REQ-1.md",
        branch="reqdrive/x",
        base_ref="main",
        base_sha=BASE,
        head_sha=head,
        stories=[record],
        baseline=[gate("tests", True), gate("lint", False)],
        baseline_sha=BASE,
    )


def attempt(
    n: int, outcome: AttemptOutcome, commit: str | None, gates: list[GateResult]
) -> AttemptRecord:
    return AttemptRecord(iteration=n, attempt=n, outcome=outcome, commit=commit, gates=gates)


def test_the_kept_attempt_that_made_the_head_gives_the_final_results() -> None:
    cp = checkpoint(
        attempt(1, AttemptOutcome.GATES_FAILED, None, [gate("tests", False)]),
        attempt(2, AttemptOutcome.PASSED, HEAD, JUDGED),
    )
    found = judged_results(cp, GATES)
    assert found is not None
    assert (found.gates, found.reused_from) == (JUDGED, "iteration 2 (US-001 attempt 2)")


def test_the_baseline_gives_them_when_no_story_moved_the_head() -> None:
    found = judged_results(checkpoint(head=BASE), GATES)
    assert found is not None
    assert found.reused_from == "the baseline"


def test_other_gate_commands_or_a_gate_missing_are_run_again() -> None:
    changed = [GATES[0], GateSpec(name="lint", command="run lint --strict")]
    cp = checkpoint(attempt(1, AttemptOutcome.PASSED, HEAD, JUDGED))
    assert judged_results(cp, changed) is None
    # Stopped at the first failing gate: lint never ran on the head.
    cp = checkpoint(attempt(1, AttemptOutcome.PASSED, HEAD, JUDGED[:1]))
    assert judged_results(cp, GATES) is None
    # A head no attempt of this run made (resumed from elsewhere) is checked again.
    assert (
        judged_results(checkpoint(attempt(1, AttemptOutcome.PASSED, "d" * 40, JUDGED)), GATES)
        is None
    )
