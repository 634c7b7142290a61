"""Verdicts: a story's tests against the state it started from, per test id and per gate."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from worker.model.gates import MISSING, GateResult, TestStatus, is_partial
from worker.model.state import (
    AttemptOutcome,
    AttemptRecord,
    StoryRecord,
    StoryState,
    TestCheck,
)
from worker.verdict.findings import listed, new_findings
from worker.verdict.flaky import KEPT_OUTCOMES, Rerun, RerunFinding
from worker.verdict.partial_runs import known_results, unseen_at_head

# Attempts whose commit stays on the branch.
KEPT = KEPT_OUTCOMES
# A test that passed before the story and fails with it: re-run alone before it counts (flaky.py).
REGRESSION = "fails now; it passed before the story"
PROBLEMS_SHOWN = 5  # in one attempt's reason; the record lists every test
FEEDBACK_CHARS = 12_000  # of the next attempt's "why the previous attempt failed"


class Verdict(StrEnum):
    """The worker's judgement of one attempt against the state it started from."""

    PASSED = "passed"
    FAILED = "failed"
    UNVERIFIED = "unverified"

    def worse_than(self, other: Verdict) -> bool:
        order = (Verdict.PASSED, Verdict.UNVERIFIED, Verdict.FAILED)
        return order.index(self) > order.index(other)


@dataclass(frozen=True)
class Judgement:
    """A verdict, its reason, and every test it looked at."""

    verdict: Verdict
    reason: str
    tests: list[TestCheck] = field(default_factory=list)
    gate_problems: list[str] = field(default_factory=list)  # failures no test id explains

    def regressions(self) -> list[str]:
        """Tests that passed before and fail now, when nothing else fails the story: those
        whose re-runs alone could still turn the verdict (flaky.py); otherwise none. A test
        the story owns is never among them: its own tests must pass, flaky or not."""
        failing = [c for c in self.tests if c.problem]
        if self.gate_problems or any(c.problem != REGRESSION or c.owned for c in failing):
            return []
        return [c.id for c in failing]


def tests_by_id(gates: Sequence[GateResult]) -> dict[str, TestStatus] | None:
    """Every test id any gate reported, with its status; None when no gate reports tests."""
    reported = [g.tests for g in gates if g.tests is not None]
    if not reported:
        return None
    merged: dict[str, TestStatus] = {}
    for tests in reported:
        for test_id, status in tests.items():
            if merged.get(test_id) is not TestStatus.FAILED:
                merged[test_id] = status
    return merged


def added_tests(reference: Sequence[GateResult], results: Sequence[GateResult]) -> list[str]:
    """Test ids this attempt's checks report that the state it started from did not."""
    before, after = tests_by_id(reference) or {}, tests_by_id(results) or {}
    return sorted(set(after) - set(before))


def judge_story(
    reference: Sequence[GateResult],
    results: Sequence[GateResult],
    expected: Sequence[str],
    *,
    owned: Collection[str] = (),
    at_parent: Mapping[str, str] | None = None,
    rewritten: Collection[str] = (),
    reruns: Mapping[str, RerunFinding] | None = None,
) -> Judgement:
    """Did this attempt pass? Fail-to-pass and pass-to-pass, per test id (as SWE-bench judges
    a patch): every test the story owns passes after it (a test it added must also fail
    without its change: `at_parent`; skipped or missing counts as failed), and every test
    that passed before still passes, unless its re-runs alone showed it flaky (`reruns`:
    kept out). A rewritten test (`rewritten`) never counts as passing. Without any per-test
    results the gates are judged whole (`judge`)."""
    before, after = tests_by_id(reference), tests_by_id(results)
    if before is None and after is None:
        verdict, reason = judge(reference, results, expected)
        return Judgement(verdict, reason)
    gate_problems = _gate_problems(reference, results, expected)
    checks = _test_checks(before or {}, after or {}, owned, at_parent or {}, rewritten)
    checks = [_with_reruns(c, (reruns or {}).get(c.id)) for c in checks]
    problems = gate_problems + [f"{c.id} {c.problem}" for c in checks if c.problem]
    if problems:
        shown = "; ".join(problems[:PROBLEMS_SHOWN])
        more = len(problems) - PROBLEMS_SHOWN
        why = shown + (f"; and {more} more" if more > 0 else "")
        return Judgement(Verdict.FAILED, why, checks, gate_problems)
    return Judgement(Verdict.PASSED, "", checks)


def _with_reruns(check: TestCheck, found: RerunFinding | None) -> TestCheck:
    """A failing test that passed before, with what its re-runs alone showed."""
    if found is None or check.problem != REGRESSION:
        return check
    problem = {
        Rerun.FLAKY: "",
        Rerun.UNSTABLE: f"{REGRESSION}, and flips only with the story's change",
        Rerun.BROKEN: f"{REGRESSION} (the same when run again alone)",
        Rerun.BEFORE: "",  # not this story's: traced when the whole suite judges the head
    }[found.rerun]
    update = {"problem": problem, "reruns": found.said(), "flaky": found.flaky}
    return check.model_copy(update=update)


def _gate_problems(
    reference: Sequence[GateResult], results: Sequence[GateResult], expected: Sequence[str]
) -> list[str]:
    """Whole-gate failures per-test results cannot explain: a gate that did not run, timed
    out, or broke while it reports no tests and passed before."""
    ran, was = {g.name: g for g in results}, {g.name: g for g in reference}
    problems = []
    for name in expected:
        gate = ran.get(name)
        if gate is None:
            problems.append(f"gate {name} did not run (an earlier gate failed)")
        elif gate.timed_out:
            problems.append(f"gate {name} timed out")
        elif not gate.passed and gate.tests is None:
            problem = _untested_gate_problem(name, was.get(name), gate)
            problems += [problem] if problem else []
        elif not gate.passed and not gate.failed_tests:
            # Red with no failing test (a coverage floor, an internal error): held against the
            # story unless the gate was already red without a failing test before it.
            previous = was.get(name)
            if previous is None or previous.passed or previous.failed_tests:
                problems.append(f"gate {name} failed, though no test failed (see its output)")
    return problems


def _untested_gate_problem(name: str, previous: GateResult | None, gate: GateResult) -> str:
    """Why a failing gate without per-test results fails the story, or "": judged on the
    findings it adds (findings.py) when its output names them, else on its exit code, which
    is held against the story only when the gate passed before (or reported tests)."""
    if previous is None or previous.tests is not None:
        return f"gate {name} failed"
    new = new_findings(previous, gate)
    if new:
        return f"gate {name} failed: {listed(new)}"
    return f"gate {name} failed" if new is None and previous.passed else ""


def _test_checks(
    before: Mapping[str, TestStatus],
    after: Mapping[str, TestStatus],
    owned: Collection[str],
    at_parent: Mapping[str, str],
    rewritten: Collection[str],
) -> list[TestCheck]:
    passed_before = {t for t, status in before.items() if status is TestStatus.PASSED}
    # A failing test no one owns may fail on, but not vanish: deleting it would turn the final
    # check green without anyone fixing it.
    failing_gone = {
        t
        for t, status in before.items()
        if status is TestStatus.FAILED and after.get(t) in (None, TestStatus.SKIPPED)
    }
    checks = []
    for test_id in sorted(set(owned) | passed_before | failing_gone | set(rewritten)):
        now = str(after.get(test_id, MISSING))
        check = TestCheck(
            id=test_id,
            before=str(before.get(test_id, MISSING)),
            after=now,
            owned=test_id in owned,
            added=test_id in at_parent,
            at_parent=at_parent.get(test_id),
        )
        checks.append(check.model_copy(update={"problem": _problem(check, test_id in rewritten)}))
    return checks


def _problem(check: TestCheck, rewritten: bool) -> str:
    """Why this test keeps the story from passing, or ""."""
    if rewritten and check.before != MISSING:
        return "was rewritten by the story (a test must not be changed to pass)"
    if check.after == MISSING:
        return "was deleted or deselected" if check.before != MISSING else "did not run"
    if check.after == TestStatus.SKIPPED:
        return "is skipped" if check.before != TestStatus.SKIPPED or check.owned else ""
    if check.after == TestStatus.FAILED:
        return "still fails" if check.owned and check.before != TestStatus.PASSED else REGRESSION
    if check.added and check.at_parent not in (TestStatus.FAILED, MISSING):
        return "passes without the story's change too, so it proves nothing"
    return ""


def feedback(attempt: AttemptRecord) -> str | None:
    """What the next attempt's prompt says about this failed one: each failing test with its
    output, then the output of failing gates that report no tests."""
    if attempt.outcome is AttemptOutcome.PASSED:
        return None
    outputs = {t: text for g in attempt.gates for t, text in g.failures.items()}
    parts = []
    for check in attempt.tests:
        if check.problem:
            output = outputs.get(check.id, "").strip()
            parts.append(f"{check.id} {check.problem}" + (f"\n{output}" if output else ""))
    for gate in attempt.gates:
        if not gate.passed and (gate.tests is None or not parts):
            parts.append(f"$ {gate.command}\n{gate.output_tail.strip()[-FEEDBACK_CHARS:]}")
    if not parts:
        return attempt.reason or None
    return (attempt.reason + "\n\n" if attempt.reason else "") + "\n\n".join(parts)[
        -FEEDBACK_CHARS:
    ]


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
            if gate.timed_out:
                return Verdict.FAILED, f"gate {name} failed (timed out)"
            return Verdict.FAILED, _untested_gate_problem(name, was, gate)
        if gate.failed_tests is None or was.failed_tests is None:
            new = new_findings(was, gate) if was.tests is None else None
            if new:
                return Verdict.FAILED, f"gate {name} failed: {listed(new)}"
            if new is None:
                unknown.append(name)
            continue
        new = sorted(set(gate.failed_tests) - set(was.failed_tests))
        if new:
            shown = ", ".join(new[:5]) + (" ..." if len(new) > 5 else "")
            return Verdict.FAILED, f"gate {name}: new failing tests: {shown}"
    if unknown:
        return Verdict.UNVERIFIED, (
            f"gate {', '.join(unknown)} fails on the base too and reports neither per-test "
            "results nor findings (`path:line: message`), so what this story changed is unknown"
        )
    return Verdict.PASSED, "added no failing test"


def kept_checks(stories: Sequence[StoryRecord]) -> list[list[GateResult]]:
    """The gates of every kept attempt that ran any, oldest first: the last made the head."""
    kept = sorted(
        (a for s in stories for a in s.attempts if a.outcome in KEPT and a.gates),
        key=lambda a: a.iteration,
    )
    return [a.gates for a in kept]


def partly_judged(stories: Sequence[StoryRecord]) -> bool:
    """Was a commit on the branch kept on a check that ran part of the suite?"""
    return any(is_partial(gates) for gates in kept_checks(stories))


def reference_gates(
    stories: Sequence[StoryRecord], baseline: Sequence[GateResult]
) -> list[GateResult]:
    """What the last kept state's gates said: the baseline, or the latest story kept; a
    story kept on a check that ran part of the suite (`checks: affected`) updates the tests
    it ran and leaves the others as the state before it knew them (partial_runs.overlay).

    Judging against it (not only the base commit) also catches a story that breaks a
    baseline test an earlier story had fixed."""
    kept = kept_checks(stories)
    whole = [i for i, gates in enumerate(kept) if not is_partial(gates)]
    start = whole[-1] if whole else -1
    known = kept[start] if whole else baseline
    return known_results(kept[start + 1 :], known)


def passed_before(stories: Sequence[StoryRecord], baseline: Sequence[GateResult]) -> set[str]:
    """The tests that passed at the baseline, or in what the run knows since (reference_gates)."""
    known = tests_by_id(reference_gates(stories, baseline)) or {}
    before = tests_by_id(baseline) or {}
    return {t for t in {*known, *before} if TestStatus.PASSED in (known.get(t), before.get(t))}


def unseen_before(stories: Sequence[StoryRecord], reference: Sequence[GateResult]) -> set[str]:
    """The tests of `reference` (reference_gates) that the check which made the head did
    not run."""
    kept = kept_checks(stories)
    return unseen_at_head(reference, kept[-1] if kept else None)


def untrusted(gates: Sequence[GateResult]) -> str:
    """Why these gates' results cannot make anything "passed" or ready, or "": the worker's
    collectors disagree (needs review), or a gate that runs tests gave no per-test results
    (unverified, with the configuration that would give them)."""
    said = [f"gate {g.name}: {'; '.join(g.disagreements)}" for g in gates if g.disagreements]
    said += [g.no_results for g in gates if g.no_results and not g.disagreements]
    return "; ".join(said)


def fail_fast_on(baseline: Sequence[GateResult]) -> bool:
    """Stop at the first failing gate? Not on a failing baseline, where every gate's result
    is needed to compare failures one by one."""
    return all(g.passed for g in baseline)


def story_state(outcome: AttemptOutcome, number: int, max_retries: int) -> StoryState:
    """A story's state after its attempt `number` ended with `outcome`."""
    if outcome in (AttemptOutcome.PASSED, AttemptOutcome.NOTHING_TO_CHANGE):
        return StoryState.PASSED
    if outcome is AttemptOutcome.UNVERIFIED:
        return StoryState.UNVERIFIED
    if outcome is AttemptOutcome.NEEDS_REVIEW:
        return StoryState.NEEDS_REVIEW
    return StoryState.FAILED if number >= max_retries else StoryState.PENDING
