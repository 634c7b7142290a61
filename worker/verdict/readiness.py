"""A run's readiness: whether its branch can be marked ready for review, and what its final
checks say about each failing test and the base commit's failures."""

from __future__ import annotations

from collections.abc import Sequence

from worker.model.gates import GateResult, TestStatus
from worker.model.state import StopReason, StoryRecord, StoryState
from worker.verdict.base_debt import base_debt, failing_gate
from worker.verdict.flaky import flaky_in, red_only_by
from worker.verdict.judging import partly_judged, passed_before, tests_by_id, untrusted

VANISHED_SHOWN = 5  # in a draft's reason


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
    baseline: Sequence[GateResult] = (),
) -> tuple[bool, str | None]:
    """Ready for review, or a draft and why: every story passed and the final gates are green,
    but for gates failing on the base too to which the branch adds nothing (base_debt), and
    gates red only because tests a story showed flaky failed (flaky.py)."""
    if not expected_gates:
        return False, "no gates are configured, so nothing verified the stories"
    if stop is StopReason.CANCELLED:
        return False, "the run was cancelled"
    if stop is StopReason.SUPERSEDED:
        return False, "the requirement was edited, so it runs again on the new text"
    open_stories = [s for s in stories if s.state is not StoryState.PASSED]
    if open_stories:
        listed = ", ".join(f"{s.id} ({s.state})" for s in open_stories)
        why = f"{len(open_stories)} of {len(stories)} stories did not pass: {listed}"
        budget = stop in (StopReason.BUDGET_SPENT, StopReason.MONTHLY_BUDGET_SPENT)
        return False, f"{stop}; {why}" if budget else why
    if not stories:
        return False, "the plan has no story"
    ran = {g.name for g in final}
    missing = [name for name in expected_gates if name not in ran]
    if missing:
        return False, f"the final checks did not run: {', '.join(missing)}"
    distrust = untrusted(final)
    if distrust:
        return False, f"the final checks' results cannot be trusted: {distrust}"
    debt, flaky = base_debt(baseline, final), flaky_in(stories)
    failing = [
        failing_gate(g, baseline)
        for g in final
        if not g.passed and g.name not in debt and not red_only_by(g, flaky)
    ]
    if failing:
        return False, f"the final checks fail on the branch: {', '.join(failing)}"
    gone = vanished(stories, baseline, final)
    if gone:
        more = len(gone) - VANISHED_SHOWN
        shown = ", ".join(gone[:VANISHED_SHOWN]) + (f" and {more} more" if more > 0 else "")
        return False, (
            f"the whole suite at the branch's head no longer runs, or skips, tests that passed "
            f"before: {shown}"
        )
    return True, None


def vanished(
    stories: Sequence[StoryRecord], baseline: Sequence[GateResult], final: Sequence[GateResult]
) -> list[str]:
    """After stories judged on part of the suite (`checks: affected`): the tests that passed
    before (at the baseline or in a story's check) that the final checks skipped or did not
    report at all. A story's check on the whole suite holds that against the story ("was
    deleted or deselected", "is skipped"); a partial one never saw those tests, and code
    that no import of theirs reaches can still empty their parametrize data, mark their
    class `__test__ = False` or raise unittest.SkipTest in the whole run only. Nothing
    failed, so the final gate is green and nothing is bisected: without this the run would
    be ready with the tests gone. A story's own test that passes only in its narrowed check
    and is skipped in the whole run is among them."""
    if not partly_judged(stories):
        return []
    at_head = tests_by_id(final)
    if at_head is None:  # no per-test results: the final checks are judged as such
        return []
    flaky = flaky_in(stories)
    return sorted(
        t
        for t in passed_before(stories, baseline)
        if at_head.get(t) in (None, TestStatus.SKIPPED) and t not in flaky
    )


def final_failures(
    stories: Sequence[StoryRecord], baseline: Sequence[GateResult], final: Sequence[GateResult]
) -> dict[str, str]:
    """Each test failing on the final branch, with why: whose it was and what became of it."""
    failing = tests_by_id(final) or {}
    before = tests_by_id(baseline) or {}
    owner = {t: s for s in stories for t in s.tests}
    flaky = flaky_in(stories)
    reasons = {}
    for test_id in sorted(t for t, status in failing.items() if status is TestStatus.FAILED):
        story = owner.get(test_id)
        if test_id in flaky:
            reasons[test_id] = f"flaky, kept out of the verdict ({flaky[test_id]})"
        elif story is not None:
            reasons[test_id] = f"{story.id} owns it and ended {story.state}"
        elif before.get(test_id) is TestStatus.FAILED:
            reasons[test_id] = "failed before the run and no story claimed it"
        elif before.get(test_id) is TestStatus.PASSED:
            reasons[test_id] = "passed before the run and fails on this branch"
        else:
            reasons[test_id] = "new on this branch and failing"
    return reasons


def unclaimed(stories: Sequence[StoryRecord], baseline: Sequence[GateResult]) -> list[str]:
    """The base commit's failing tests that no story claimed: final checks only."""
    claimed = {t for s in stories for t in s.tests}
    before = tests_by_id(baseline) or {}
    return sorted(t for t, st in before.items() if st is TestStatus.FAILED and t not in claimed)
