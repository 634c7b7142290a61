"""Checks that ran part of the suite (`checks: affected`): what they are held against, and
what the run knows of every test once one is kept."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from worker.model.gates import GateResult, TestStatus, is_partial


def in_scope(test_id: str, scope: Collection[str]) -> bool:
    """Is this test one a check limited to `scope` ran: named there itself, or in one of
    its files? Results name a test by its JUnit id (`tests.test_a.TestB::test_c`) or its
    path (`tests/test_a.py::test_c`); a file is named by its path from the repository's top.
    A test whose module pytest names from a folder below the top (its rootdir) matches no
    file here: it is not held against the check, and the whole suite at the end judges it.

    Below a file's dotted name comes a class (`tests.test_a.TestB`), but a folder named like
    the module holds tests too (`tests/test_a/test_c.py` is `tests.test_a.test_c`), which a
    check on tests/test_a.py never ran: only a capitalised part (a class, as pytest's
    `Test*` and every convention name them) is taken for the file's own. A class named
    otherwise is left to the whole suite at the end, like a module below the rootdir."""
    if test_id in scope:
        return True
    module = test_id.split("::", 1)[0]
    for name in scope:
        dotted = name.removesuffix(".py").replace("/", ".")
        if module in (name, dotted):
            return True
        below = module.removeprefix(dotted + ".")
        if below != module and below[:1].isupper():
            return True
    return False


def within(reference: Sequence[GateResult], scope: Collection[str]) -> list[GateResult]:
    """The reference as far as a check limited to `scope` (test files and test ids) can be
    held against it: each gate's tests there only (in_scope). A gate counts as green there
    when none of those tests failed, whatever the rest of the suite did."""
    wanted = set(scope)
    narrowed = []
    for gate in reference:
        if gate.tests is None:
            narrowed.append(gate)
            continue
        tests = {t: s for t, s in gate.tests.items() if in_scope(t, wanted)}
        update = {
            "tests": tests,
            "failures": {t: o for t, o in gate.failures.items() if t in tests},
            "failure_sites": {t: s for t, s in gate.failure_sites.items() if t in tests},
            "passed": gate.passed or TestStatus.FAILED not in tests.values(),
        }
        narrowed.append(gate.model_copy(update=update))
    return narrowed


def overlay(known: Sequence[GateResult], later: Sequence[GateResult]) -> list[GateResult]:
    """What the run knows after a kept check: a gate it ran whole replaces what was known of
    it; a gate it ran in part updates the tests it ran and keeps every other test as it was
    (their last whole or partial result)."""
    merged = {g.name: g for g in known}
    for gate in later:
        earlier = merged.get(gate.name)
        if gate.selected is None or earlier is None or earlier.tests is None or not gate.tests:
            merged[gate.name] = gate
            continue
        tests = {**earlier.tests, **gate.tests}
        failures = {t: o for t, o in earlier.failures.items() if t not in gate.tests}
        sites = {t: s for t, s in earlier.failure_sites.items() if t not in gate.tests}
        merged[gate.name] = earlier.model_copy(
            update={
                "tests": tests,
                "failures": failures | gate.failures,
                "failure_sites": sites | gate.failure_sites,
                # Red without a failing test before (a coverage floor): red still.
                "passed": TestStatus.FAILED not in tests.values()
                and (earlier.passed or bool(earlier.failed_tests)),
                "disagreements": [*earlier.disagreements, *gate.disagreements],
            }
        )
    return list(merged.values())


def known_results(
    kept: Iterable[Sequence[GateResult]], baseline: Sequence[GateResult]
) -> list[GateResult]:
    """The baseline with each kept check laid over it in order (overlay)."""
    known = list(baseline)
    for gates in kept:
        known = overlay(known, gates)
    return known


def unseen_at_head(known: Sequence[GateResult], at_head: Sequence[GateResult] | None) -> set[str]:
    """The tests of what the run knows that the check which made the head did not run
    (`at_head`: None when the baseline made it, which ran them all): their results are
    older than the head, so a story's check cannot assume they passed on its parent."""
    if at_head is None or not is_partial(at_head):
        return set()
    ran = {t for g in at_head for t in (g.tests or {})}
    return {t for g in known for t in (g.tests or {})} - ran
