"""Verdicts: a story's gates against the state it started from, and a run's readiness."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from worker.gates import GateResult
from worker.state import AttemptOutcome, StopReason, StoryRecord, StoryState

KEPT = (AttemptOutcome.PASSED, AttemptOutcome.UNVERIFIED)  # attempts whose commit stays


class Verdict(StrEnum):
    """The worker's judgement of one attempt's gates against the base commit's."""

    PASSED = "passed"
    FAILED = "failed"
    UNVERIFIED = "unverified"


def judge(
    reference: Sequence[GateResult], results: Sequence[GateResult], expected: Sequence[str]
) -> tuple[Verdict, str]:
    """Did this attempt pass, judged against the gates of the state it started from?

    All gates green is a pass. Otherwise a gate that was green before and fails now is a
    failure; a gate that already failed before fails the story only if it reports a failing
    test id that was not failing before. Without per-test results it cannot be told.
    """
    ran = {g.name: g for g in results}
    if all(name in ran and ran[name].passed for name in expected):
        return Verdict.PASSED, ""
    before = {g.name: g for g in reference}
    unknown: list[str] = []
    for name in expected:
        gate = ran.get(name)
        if gate is not None and gate.passed:
            continue
        was = before.get(name)
        if gate is None:
            return Verdict.FAILED, f"gate {name} did not run (an earlier gate failed)"
        if was is None or was.passed:
            return Verdict.FAILED, f"gate {name} failed" + (
                " (timed out)" if gate.timed_out else ""
            )
        if gate.failed_tests is None or was.failed_tests is None:
            unknown.append(name)
            continue
        new = sorted(set(gate.failed_tests) - set(was.failed_tests))
        if new:
            shown = ", ".join(new[:5]) + (" ..." if len(new) > 5 else "")
            return Verdict.FAILED, f"gate {name}: new failing tests: {shown}"
    if unknown:
        return Verdict.UNVERIFIED, (
            f"gate {', '.join(unknown)} already failed before this story "
            "and reports no per-test results"
        )
    return Verdict.PASSED, "added no failing test"


def reference_gates(
    stories: Sequence[StoryRecord], baseline: Sequence[GateResult]
) -> list[GateResult]:
    """What the last kept state's gates said: the baseline, or the latest story kept.

    Judging against it (not only the base commit) also catches a story that breaks a
    baseline test an earlier story had fixed."""
    kept = [a for s in stories for a in s.attempts if a.outcome in KEPT and a.gates]
    if not kept:
        return list(baseline)
    return max(kept, key=lambda a: a.iteration).gates


def fail_fast_on(baseline: Sequence[GateResult]) -> bool:
    """Stop at the first failing gate? Not on a failing baseline, where every gate's result
    is needed to compare failures one by one."""
    return all(g.passed for g in baseline)


def story_state(outcome: AttemptOutcome, number: int, max_retries: int) -> StoryState:
    """A story's state after its attempt `number` ended with `outcome`."""
    if outcome is AttemptOutcome.PASSED:
        return StoryState.PASSED
    if outcome is AttemptOutcome.UNVERIFIED:
        return StoryState.UNVERIFIED
    return StoryState.FAILED if number >= max_retries else StoryState.PENDING


def baseline_changes(
    baseline: Sequence[GateResult], final: Sequence[GateResult]
) -> tuple[list[str], list[str]]:
    """Which of the base commit's failing tests the branch fixed, and which still fail."""
    after = {g.name: g for g in final}
    fixed: set[str] = set()
    remaining: set[str] = set()
    for gate in baseline:
        if gate.passed or not gate.failed_tests:
            continue
        failing_now = _failing_now(after.get(gate.name), set(gate.failed_tests))
        fixed |= set(gate.failed_tests) - failing_now
        remaining |= set(gate.failed_tests) & failing_now
    return sorted(fixed), sorted(remaining)


def _failing_now(gate: GateResult | None, before: set[str]) -> set[str]:
    if gate is not None and gate.passed:
        return set()
    if gate is None or gate.failed_tests is None:
        return before  # unknown: nothing can be called fixed
    return set(gate.failed_tests)


def readiness(
    stories: Sequence[StoryRecord],
    final: Sequence[GateResult],
    *,
    expected_gates: Sequence[str],
    stop: StopReason,
) -> tuple[bool, str | None]:
    """Ready for review, or a draft and why: every story passed and the final gates are green."""
    if not expected_gates:
        return False, "no gates are configured, so nothing verified the stories"
    if stop is StopReason.CANCELLED:
        return False, "the run was cancelled"
    open_stories = [s for s in stories if s.state not in (StoryState.PASSED, StoryState.UNVERIFIED)]
    if open_stories:
        listed = ", ".join(f"{s.id} ({s.state})" for s in open_stories)
        return False, f"{len(open_stories)} of {len(stories)} stories did not pass: {listed}"
    ran = {g.name for g in final}
    missing = [name for name in expected_gates if name not in ran]
    if missing:
        return False, f"the final checks did not run: {', '.join(missing)}"
    failing = [g.name for g in final if not g.passed]
    if failing:
        return False, f"the final checks fail on the branch: {', '.join(failing)}"
    return True, None
