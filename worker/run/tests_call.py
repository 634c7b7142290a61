"""A story's tests call (tests: first): the agent writes only its tests; the worker proves
each new or changed one fails on the story's parent, and commits them: the frozen tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from worker.model.gates import MISSING, GateResult, TestStatus
from worker.model.state import AttemptOutcome, AttemptRecord, FrozenTests, StoryRecord
from worker.plan.prompting import TESTS_TEMPLATE
from worker.report.inert_text import neutralize
from worker.run.calls import call_agent, run_gates_on
from worker.run.context import RunContext
from worker.run.nothing_to_change import already_done
from worker.run.resume import story_trailer
from worker.run.selected import run_files
from worker.verdict.frozen_side import Keep, drop_new_ignored, ignored_test_files, keep_side
from worker.verdict.judging import added_tests, reference_gates, tests_by_id
from worker.verdict.secret_scan import SecretScanner
from worker.verdict.story_verdict import added_by, proven_tests
from worker.verdict.tampering import changed_files, rewritten_tests
from worker.verdict.test_side import test_modules_only

PROBLEMS_SHOWN = 5
# What a tests call's artifacts add to its iteration's names: iteration-3-tests.log, ...
TESTS_CALL = "-tests"


class TestsCall:
    """The tests call of one attempt, from the commit the story starts on; the worktree is
    left at the frozen commit when it freezes, else back where it started."""

    __test__ = False  # a domain name, not a test class for pytest to collect

    def __init__(self, ctx: RunContext, record: StoryRecord, *, iteration: int, number: int):
        self.ctx, self.record = ctx, record
        self.iteration, self.number = iteration, number
        self.start = ctx.cp.head_sha
        # "-tests", never ".tests": a gate named `tests` writes <label>.tests.log.
        self.label = f"{ctx.folder.gates_label(iteration)}{TESTS_CALL}"

    def run(self, prompt_values: dict[str, object]) -> tuple[FrozenTests | None, AttemptRecord]:
        """The frozen tests, or None and the refused attempt's record; the record also carries
        the call's cost and exit for the attempt that goes on."""
        ctx, side = self.ctx, self.ctx.test_side
        ignored = ignored_test_files(ctx.git.path, side)
        prompt = ctx.renderer.render(TESTS_TEMPLATE, **prompt_values)
        outcome = call_agent(ctx, f"{self.iteration}{TESTS_CALL}", prompt)
        base: dict[str, Any] = {
            "iteration": self.iteration,
            "attempt": self.number,
            "cost_usd": outcome.cost_usd,
            "agent_exit_code": outcome.exit_code,
            "refused_tools": list(outcome.denials),
        }
        if ctx.cancel.is_set():
            return None, self._back(AttemptOutcome.CANCELLED, "cancelled", base)
        if outcome.timed_out:
            why = f"the tests call did not finish within {ctx.agent.timeout_s:g}s"
            return None, self._back(AttemptOutcome.AGENT_TIMED_OUT, why, base)
        forbidden = [ctx.redactor.redact(p) for p in ctx.git.gather(self.start, ctx.forbidden)]
        base["forbidden_writes"] = forbidden
        reverted = keep_side(ctx.git.path, self.start, side, Keep.TESTS)
        reverted += drop_new_ignored(ctx.git.path, side, ignored)
        reverted = [ctx.redactor.redact(p) for p in reverted]
        noted = _reverted_note(reverted)
        if not ctx.git.has_change(self.start):
            # A CI-fix story is judged on the tests CI failed that the worker reproduced; a
            # feedback story whose comment changes no behaviour (a rename, a docstring) has no
            # test to write. Both go on to their implement call without one, but with no
            # fail→pass test of their own they end "needs review" at best, never "passed"
            # (story_verdict.unproven): pass→pass alone does not show the work done.
            baseline = tests_by_id(ctx.cp.baseline or []) or {}
            if added_by(self.record) or proven_tests(self.record, baseline):
                return FrozenTests(parent=self.start, reverted=reverted), AttemptRecord(
                    outcome=AttemptOutcome.PASSED, **base
                )
            why = "the tests call wrote no test for the story"
            if self.record.tests:  # the plan's own tests pass already
                why += " (its tests passed before the story: nothing shows it done)"
            why += noted
            return None, self._back(AttemptOutcome.TESTS_REFUSED, why, base)
        scanner = SecretScanner(ctx.redactor, ctx.spec.limits.scan_deadline_s)
        if refused := scanner.scan_change(ctx.git.path, self.start):
            why = "the tests hold a secret value or a file that cannot be scanned (" + "; ".join(
                str(f) for f in refused
            )
            return None, self._back(AttemptOutcome.CREDENTIAL_IN_CHANGE, why + ")", base)
        commit = ctx.git.commit(tests_subject(self.record), story_trailer(self.record.id))
        changed = changed_files(ctx.git.path, self.start, commit)
        gates, alone = self._proof_run(changed)
        if ctx.cancel.is_set():
            return None, self._back(AttemptOutcome.CANCELLED, "cancelled", base)
        frozen, problems = self._prove(commit, changed, gates, reverted, alone)
        if problems and (done := self._already_done(frozen, problems, base)) is not None:
            return None, done
        if problems:
            why = "its tests were not frozen: " + "; ".join(problems[:PROBLEMS_SHOWN])
            more = len(problems) - PROBLEMS_SHOWN
            why += (f"; and {more} more" if more > 0 else "") + noted
            patch = ctx.folder.patch_path(self.iteration).name.replace(
                ".patch", f"{TESTS_CALL}.patch"
            )
            ctx.folder.write_text(patch, ctx.git.diff(self.start, commit) + "\n")
            record = self._back(AttemptOutcome.TESTS_REFUSED, why, base)
            return None, record.model_copy(update={"gates": gates})
        return frozen, AttemptRecord(outcome=AttemptOutcome.PASSED, gates=gates, **base)

    def _proof_run(self, changed: Sequence[str]) -> tuple[list[GateResult], list[str]]:
        """The checks on the `test:` commit (the story's parent and its tests), and the test
        modules they ran alone ([]: the whole suite ran).

        Only new or changed test modules: their own tests run, through `only=`. Such a file
        cannot change another test's state by itself (no conftest, config, fixture or
        helper), and what it might still do at import (pytest still imports every module) is
        caught by the implement attempt, whose whole run is judged pass-to-pass against the
        story's reference; the implement attempt also runs them exactly so again on its
        commit (selected.alike_at_head), so a test that fails only where few tests run proves
        nothing. Anything else the tests call changed may change any test: the
        whole suite runs, and every other test must keep its state here. A selection that
        reported nothing of a module (a runner that names files otherwise) runs whole."""
        ctx = self.ctx
        modules = test_modules_only(changed, ctx.git.path)
        if modules:
            gates = run_files(ctx, self.label, modules)
            reported = tests_by_id(gates)
            if reported is not None and all(_reported(m, reported) for m in modules):
                return gates, modules
        return run_gates_on(ctx, self.label, fail_fast=False), []

    def _prove(
        self,
        commit: str,
        changed: Sequence[str],
        gates: Sequence[GateResult],
        reverted: list[str],
        alone: list[str],
    ) -> tuple[FrozenTests, list[str]]:
        """Each new or changed test fails here, on the story's parent; no other test changed
        state (checked here when the whole suite ran, else by the implement attempt); no
        existing test changed that the plan did not name."""
        ctx, record, path = self.ctx, self.record, self.ctx.git.path
        reference = reference_gates(ctx.cp.stories, ctx.cp.baseline or [])
        # A gate input the tests call changed is judged with the implement attempt's, which
        # counts them from the story's start (attempt.py).
        frozen = FrozenTests(
            parent=self.start, commit=commit, reverted=reverted, proof_selected=alone
        )
        before, now = tests_by_id(reference) or {}, tests_by_id(gates)
        if now is None:  # nothing per test to prove with: frozen, and said so
            return frozen.model_copy(update={"proven": False}), []
        added = added_tests(reference, gates)
        existing = [t for t, status in before.items() if status is not TestStatus.SKIPPED]
        rewritten = rewritten_tests(path, self.start, commit, changed, existing)
        declared = {c.path for c in record.changes_tests}
        allowed = [t for t in rewritten if _file_of(t, changed) in declared]
        problems = [
            f"{t} is an existing test the plan does not let this story change (changesTests)"
            for t in rewritten
            if t not in allowed
        ]
        at_parent = {t: str(now.get(t, MISSING)) for t in [*added, *allowed]}
        for test_id, status in at_parent.items():
            if status == TestStatus.PASSED:
                problems.append(f"{test_id} passes without the story's code, so it proves nothing")
            elif status == TestStatus.SKIPPED:
                problems.append(f"{test_id} is skipped")
        # A new module that cannot be imported yet stops pytest's collection: the other tests
        # did not run, which tells nothing about them (the implement attempt runs them all).
        interrupted = any("::" not in t and s == TestStatus.FAILED for t, s in at_parent.items())
        for test_id, was in sorted(before.items()):
            if (interrupted or alone) and test_id not in now:
                continue
            if test_id not in at_parent and now.get(test_id) != was:
                problems.append(
                    f"{test_id} {was} before and {now.get(test_id, MISSING)} with these tests: "
                    "the tests call changed a test it does not own"
                )
        if not at_parent and not proven_tests(record, before):
            problems.append("no new test fails without the story's code")
        frozen = frozen.model_copy(
            update={
                "tests": sorted(at_parent),
                "at_parent": at_parent,
                "changed_passing": sorted(t for t in allowed if before.get(t) is TestStatus.PASSED),
            }
        )
        return frozen, problems

    def _already_done(
        self, frozen: FrozenTests, problems: list[str], base: dict[str, Any]
    ) -> AttemptRecord | None:
        """Its new tests pass already: the story judged at the head before a retry is spent."""
        return already_done(
            self.ctx,
            self.record,
            start=self.start,
            label=self.label,
            frozen=frozen,
            problems=problems,
            fields=base,
        )

    def _back(self, outcome: AttemptOutcome, why: str, base: dict[str, Any]) -> AttemptRecord:
        self.ctx.git.restore(self.start)
        return AttemptRecord(outcome=outcome, reason=why, **base)


def tests_subject(record: StoryRecord) -> str:
    title = " ".join(record.title.split())
    return f"test: [{record.id}] - {neutralize(title)}"


def frozen_owned(frozen: FrozenTests, after: Mapping[str, object]) -> dict[str, str]:
    """The frozen tests as the implement attempt's checks name them, each with its result on
    the parent. A module that could not be imported there (pytest reports one failure named
    after it) stands for every test the module holds now, or for itself when none ran."""
    owned: dict[str, str] = {}
    for test_id in frozen.tests:
        status = frozen.at_parent.get(test_id, MISSING)
        inside = [t for t in after if t.startswith(f"{test_id}::")] if "::" not in test_id else []
        for name in inside or [test_id]:
            owned[name] = status
    return owned


def changed_passing(
    frozen: FrozenTests | None, record: StoryRecord, outcome: AttemptOutcome, why: str
) -> tuple[AttemptOutcome, str]:
    """A pass resting on existing tests the story changed (changesTests) needs review."""
    changed = frozen.changed_passing if frozen else []
    if outcome is not AttemptOutcome.PASSED or not changed:
        return outcome, why
    said = "; ".join(f"{c.path}: {c.reason}" for c in record.changes_tests)
    return (
        AttemptOutcome.NEEDS_REVIEW,
        f"it changed passing tests ({', '.join(changed)}) as its plan said ({said})",
    )


def _reported(module: str, reported: Mapping[str, object]) -> bool:
    """Did the checks report this test file: a test in it, or its failure to load? (pytest
    names it as a dotted module, the JS runners by its path.)"""
    names = (module, module.removesuffix(".py").replace("/", "."))
    classes = tuple(f"{n}." for n in names)  # a test class in it: "tests.test_x.TestA::..."
    return any(t.partition("::")[0] in names or t.startswith(classes) for t in reported)


def _file_of(test_id: str, changed: Sequence[str]) -> str | None:
    classname = test_id.split("::", 1)[0]
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if path in changed:
            return path
    return None


def _reverted_note(reverted: Sequence[str]) -> str:
    if not reverted:
        return ""
    return "; reverted what it changed outside the test side: " + ", ".join(reverted)
