"""Checks that fail on the base too: which a branch made no worse, and how a draft names them."""

from __future__ import annotations

from collections.abc import Sequence

from worker.model.gates import GateResult
from worker.verdict.findings import findings, listed, new_findings


def base_debt(baseline: Sequence[GateResult], final: Sequence[GateResult]) -> dict[str, str]:
    """Each gate that fails on the branch and on the base alike while the branch adds none of
    its findings (a linter's debt the repository already had), with what the PR body says of
    it: not the branch's doing, so not a reason for a draft by itself."""
    before = {g.name: g for g in baseline}
    debt = {}
    for gate in final:
        was = before.get(gate.name)
        if was is None or gate.timed_out or not _both_failing_without_tests(was, gate):
            continue
        if new_findings(was, gate) == []:
            count = sum((findings(was.output_tail) or {}).values())
            many = "finding" if count == 1 else "findings"
            debt[gate.name] = f"{count} {many} on the base commit; this branch adds none"
    return debt


def failing_gate(gate: GateResult, baseline: Sequence[GateResult]) -> str:
    """A gate failing on the branch as a draft's reason names it: with the findings the
    branch added, or "(fails on the base too)" when the branch added no failing test or
    finding to a gate that already failed on the base."""
    was = next((g for g in baseline if g.name == gate.name), None)
    if was is None or was.passed or gate.timed_out:
        return gate.name
    if _both_failing_without_tests(was, gate):
        new = new_findings(was, gate)
        if new:
            return f"{gate.name} ({listed(new)})"
    elif gate.failed_tests is None or was.failed_tests is None:
        return gate.name  # one side has per-test results, the other not: not comparable
    elif set(gate.failed_tests) - set(was.failed_tests):
        return gate.name
    return f"{gate.name} (fails on the base too)"


def _both_failing_without_tests(was: GateResult, gate: GateResult) -> bool:
    return not was.passed and not gate.passed and was.tests is None and gate.tests is None
