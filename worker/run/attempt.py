"""One story's attempt: the agent's call, what it left gathered and committed, then judged."""

from __future__ import annotations

import logging
from typing import Any

from worker.agents.base import AgentOutcome
from worker.confine.disk import check_free_space
from worker.exceptions import GitError
from worker.model.feedback import prompt_view
from worker.model.gates import GateResult
from worker.model.repo_config import TestsMode
from worker.model.state import AttemptOutcome, AttemptRecord, FrozenTests, StoryRecord
from worker.plan.prompting import STORY_TEMPLATE
from worker.report.inert_text import neutralize
from worker.run.calls import call_agent, run_gates_on
from worker.run.context import RunContext
from worker.run.resume import story_trailer
from worker.run.selected import alike_at_head, rerun_alone, run_as_proven
from worker.run.story_scope import story_checks, story_scope
from worker.run.tests_call import TestsCall, changed_passing, frozen_owned
from worker.verdict.frozen_side import Keep, drop_new_ignored, ignored_test_files, keep_side
from worker.verdict.judging import (
    added_tests,
    fail_fast_on,
    feedback,
    reference_gates,
    tests_by_id,
    unseen_before,
)
from worker.verdict.partial_runs import within
from worker.verdict.runner_reach import reach_note, what_reaches
from worker.verdict.secret_scan import SecretScanner
from worker.verdict.story_verdict import (
    Evidence,
    added_by,
    decide,
    decide_unchanged,
    own_tests,
    proven_tests,
)
from worker.verdict.tampering import (
    changed_files,
    files_with_tests,
    gate_inputs,
    restore_paths,
    rewritten_tests,
)

log = logging.getLogger(__name__)

# What can fail inside an attempt because of what the agent left, and what the record says: the
# attempt fails, the worktree is put back, the run goes on. Anything else (the agent that cannot
# start, the cache's records changed, Redis) still ends the run.
FAILURE_CHARS = 2000  # of what failed, in the attempt's reason
ATTEMPT_FAILURES: dict[type[Exception], str] = {
    GitError: "the worker's git refused what the agent left",
    OSError: "the worker could not read or write what the agent left (a full disk?)",
    ValueError: "the worker refused to read what the agent left",  # a parser's refusal
}

# A tests call whose tests already pass at the head decides the story there (nothing_to_change):
# done, or, for a story added after the plan, needs review.
DECIDED_AT_TESTS_CALL = (AttemptOutcome.NOTHING_TO_CHANGE, AttemptOutcome.NEEDS_REVIEW)


class StoryAttempt:
    """One attempt at one story from the commit it starts on (`start`): with `tests: first`
    its tests call (skipped while its frozen tests hold) then its implement call, which starts
    on the frozen tests (`pre`). The worktree is back at `start` unless a commit is kept."""

    def __init__(self, ctx: RunContext, record: StoryRecord, *, iteration: int, number: int):
        self.ctx = ctx
        self.record = record
        self.iteration = iteration
        self.number = number  # this story's attempt number
        self.start = self.pre = ctx.cp.head_sha
        self.label = ctx.folder.gates_label(iteration)
        self.frozen: FrozenTests | None = None
        self.ignored: dict[str, tuple[int, int, int]] = {}
        self.tests_reverted: list[str] = []
        self.tests_cost: float | None = None

    def run(self) -> AttemptRecord:
        """The attempt, its outcome decided by the worker; a failure inside it fails it."""
        ctx = self.ctx
        base: dict[str, Any] = {"iteration": self.iteration, "attempt": self.number}
        check_free_space(ctx.spec.work_dir, ctx.spec.limits)  # too little ends the run
        try:
            ctx.git.restore(self.start)
            if ctx.config.tests is TestsMode.FIRST and (refused := self._freeze()) is not None:
                return refused
            prompt = ctx.renderer.render(STORY_TEMPLATE, **self._prompt_values())
            outcome = call_agent(ctx, self.iteration, prompt, start=self.pre)
            base = self._fields(outcome)
            return self._after_call(outcome, base)
        except tuple(ATTEMPT_FAILURES) as error:
            return self._failed(error, base)

    def _freeze(self) -> AttemptRecord | None:
        """The story's frozen tests checked out for the implement call: those of an earlier
        attempt while they still hold (same parent, commit at hand), else a tests call's.
        The refused attempt's record when its tests call froze nothing."""
        ctx, record = self.ctx, self.record
        frozen = record.frozen
        usable = frozen is not None and frozen.parent == self.start
        if (
            frozen is None
            or not usable
            or (frozen.commit and not ctx.git.has_commit(frozen.commit))
        ):
            call = TestsCall(ctx, record, iteration=self.iteration, number=self.number)
            frozen, said = call.run(self._prompt_values("tests"))
            if said.outcome in DECIDED_AT_TESTS_CALL:
                return said  # its earlier frozen tests stay
            record.frozen = frozen
            if frozen is None:
                return said
            self.tests_cost = said.cost_usd
            ctx.journal.save()
        self.frozen = frozen
        self.pre = frozen.commit or self.start
        ctx.git.restore(self.pre)
        self.ignored = ignored_test_files(ctx.git.path, ctx.test_side)
        return None

    def _fields(self, outcome: AgentOutcome) -> dict[str, Any]:
        """What every record of this attempt says, whatever its outcome."""
        costs = [c for c in (self.tests_cost, outcome.cost_usd) if c is not None]
        return {
            "iteration": self.iteration,
            "attempt": self.number,
            "cost_usd": sum(costs) if costs else None,
            "frozen_commit": self.frozen.commit if self.frozen else None,
            "agent_exit_code": outcome.exit_code,
            "refused_tools": list(outcome.denials),
        }

    def _after_call(self, outcome: AgentOutcome, base: dict[str, Any]) -> AttemptRecord:
        """Refused before any gate runs: cancelled, timed out, no change, a secret in it."""
        git = self.ctx.git
        if self.ctx.cancel.is_set():
            git.restore(self.start)
            return AttemptRecord(outcome=AttemptOutcome.CANCELLED, reason="cancelled", **base)
        if outcome.timed_out:
            git.restore(self.start)
            why = f"the agent did not finish within {self.ctx.agent.timeout_s:g}s"
            return AttemptRecord(outcome=AttemptOutcome.AGENT_TIMED_OUT, reason=why, **base)
        forbidden = _gather(self.ctx, self.pre)
        if self.frozen is not None:
            self._lay_over_frozen()
            base["tests_reverted"] = self.tests_reverted
        if not git.has_change(self.pre):
            git.restore(self.start)
            if self.frozen is not None and self.frozen.tests:
                why = "no changes: its frozen tests fail without the story's code"
                why += f" (agent: {outcome.error})" if outcome.error else ""
                why = _joined(why, _tests_reverted_note(self.record.id, self.tests_reverted))
                outcome_ = AttemptOutcome.NO_CHANGES
                return AttemptRecord(
                    outcome=outcome_, reason=why, forbidden_writes=forbidden, **base
                )
            return self._unchanged(outcome, base, forbidden)
        scanner = SecretScanner(self.ctx.redactor, self.ctx.spec.limits.scan_deadline_s)
        refused = scanner.scan_change(git.path, self.pre)
        if refused:
            git.restore(self.start)
            why = (
                "the change holds a secret value or a file that cannot be scanned ("
                + "; ".join(str(f) for f in refused)
                + "); nothing was committed"
            )
            return AttemptRecord(
                outcome=AttemptOutcome.CREDENTIAL_IN_CHANGE,
                reason=why,
                forbidden_writes=forbidden,
                **base,
            )
        return self._check(base, forbidden)

    def _unchanged(
        self, outcome: AgentOutcome, base: dict[str, Any], forbidden: list[str]
    ) -> AttemptRecord:
        """No change left: the story judged on its tests at the branch as it is. Gates run
        only for a story with tests of its own; without them it cannot be shown done."""
        ctx, owned = self.ctx, own_tests(self.record)
        proven = proven_tests(self.record, tests_by_id(ctx.cp.baseline or []) or {})
        gates: list[GateResult] = []
        if proven:
            cp = ctx.cp
            gates = run_gates_on(ctx, self.label, fail_fast=fail_fast_on(cp.baseline or []))
            if ctx.cancel.is_set():
                return AttemptRecord(outcome=AttemptOutcome.CANCELLED, reason="cancelled", **base)
        evidence = Evidence(
            reference_gates(ctx.cp.stories, ctx.cp.baseline or []),
            gates,
            [g.name for g in ctx.gates],
            owned=owned,
            proven=proven,
            added_by=added_by(self.record),
        )
        verdict = decide_unchanged(evidence)
        why = verdict.reason
        if verdict.outcome is AttemptOutcome.NO_CHANGES:
            why += " outside forbidden paths" if forbidden else ""
            why += f" (agent: {outcome.error})" if outcome.error else ""
        return AttemptRecord(
            outcome=verdict.outcome,
            reason=why,
            gates=gates,
            tests=verdict.tests,
            forbidden_writes=forbidden,
            **base,
        )

    def _check(self, base: dict[str, Any], forbidden: list[str]) -> AttemptRecord:
        """Commit what the agent left, run the gates on it, keep the commit if they allow."""
        ctx, record, pre = self.ctx, self.record, self.pre
        cp, path = ctx.cp, ctx.git.path
        commit = ctx.git.commit(_story_subject(record), story_trailer(record.id))
        changed = changed_files(path, pre, commit)
        since_start = changed if pre == self.start else changed_files(path, self.start, commit)
        scope = story_scope(ctx, record, self.frozen, since_start, (self.start, commit))
        gates = story_checks(ctx, self.label, scope, fail_fast=fail_fast_on(cp.baseline or []))
        if ctx.cancel.is_set():  # the gates were stopped part-way: no verdict
            ctx.git.restore(self.start)
            return AttemptRecord(outcome=AttemptOutcome.CANCELLED, reason="cancelled", **base)
        reference = reference_gates(cp.stories, cp.baseline or [])
        before = tests_by_id(reference) or {}
        # Frozen: the story is judged on its frozen tests, proven on its parent already.
        frozen = frozen_owned(self.frozen, tests_by_id(gates) or {}) if self.frozen else None
        added = sorted(frozen) if frozen is not None else added_tests(reference, gates)
        # Any test that ran before (passing, or failing for another story) must not be
        # rewritten to suit this one.
        existing = [t for t, status in before.items() if status != "skipped"]
        evidence = Evidence(
            # A check on part of the suite is held against those tests alone.
            reference if scope is None else within(reference, scope),
            gates,
            [g.name for g in ctx.gates],
            owned={*record.tests, *added},
            added=added,
            rewritten=rewritten_tests(path, pre, commit, changed, {*record.tests, *existing}),
            # From the story's start: a gate script its tests call changed counts too.
            gate_changes=gate_inputs(path, self.start, commit, since_start, ctx.gates),
            added_by=added_by(record),
            unseen=unseen_before(cp.stories, reference),
        )

        def gates_as_they_were() -> list[GateResult]:
            restore_paths(path, self.start, evidence.gate_changes)
            self._lay_over_frozen(by_checks=True)
            return story_checks(ctx, f"{self.label}.restored", scope, fail_fast=False)

        verdict = decide(
            evidence,
            rerun_alone=lambda ids: rerun_alone(
                ctx, self.label, parent=self.start, commit=commit, test_ids=ids
            ),
            added_at_parent=lambda: (
                frozen
                if frozen is not None
                else self._added_tests_at_parent(commit, changed, added)
            ),
            gates_as_they_were=gates_as_they_were,
            alike_at_head=lambda ids: alike_at_head(
                ctx, self.label, self.frozen, ids, checked=None if scope is None else (scope, gates)
            ),
        )
        outcome, why = changed_passing(self.frozen, self.record, verdict.outcome, verdict.reason)
        outcome, why = _reaching(ctx, self.start, commit, outcome, why)
        failed = outcome is AttemptOutcome.GATES_FAILED
        if failed:  # its patch is kept in the run folder, its commit not on the branch
            patch = ctx.folder.patch_path(self.iteration).name
            ctx.folder.write_text(patch, ctx.git.diff(self.start, commit) + "\n")
            ctx.git.restore(self.start)
        return AttemptRecord(
            outcome=outcome,
            reason=_joined(why, _tests_reverted_note(record.id, self.tests_reverted)),
            commit=None if failed else commit,
            gates=gates,
            tests=verdict.tests,
            gate_changes=list(evidence.gate_changes),
            forbidden_writes=forbidden,
            **base,
        )

    def _added_tests_at_parent(
        self, commit: str, changed: list[str], added: list[str]
    ) -> dict[str, str]:
        """The story's new tests run on its parent commit: only its test files applied."""
        with self.ctx.git.parent_with(self.pre, commit, files_with_tests(changed, added)):
            return run_as_proven(self.ctx, f"{self.label}.parent", added)

    def _failed(self, error: Exception, base: dict[str, Any]) -> AttemptRecord:
        """The attempt failed in the worker's own steps: recorded with why, the worktree put
        back. Nothing the agent left stays, ignored files included, or a disk it filled
        through an ignored folder would stay full."""
        ctx = self.ctx
        kind = next(why for cls, why in ATTEMPT_FAILURES.items() if isinstance(error, cls))
        # git's own words, not its command line (the worker's folders mean nothing to a reader).
        said = error.stderr.strip()[-FAILURE_CHARS:] if isinstance(error, GitError) else str(error)
        detail = ctx.redactor.redact(said or type(error).__name__)
        log.warning(
            "attempt failed in the worker's checks",
            extra={
                "run_id": ctx.spec.run_id,
                "story": self.record.id,
                "error": type(error).__name__,
            },
        )
        ctx.git.restore(self.start, ignored_too=True)
        why = f"{kind}: {detail}; the worktree was put back to {self.start[:12]}"
        return AttemptRecord(outcome=AttemptOutcome.CHECK_FAILED, reason=why, **base)

    def _lay_over_frozen(self, *, by_checks: bool = False) -> None:
        """The frozen test side laid over what the implement call (or, `by_checks`, the code
        a check ran) left: every test-side change reverted, new ignored test files removed,
        links refused. Each path is named in the attempt's record."""
        ctx = self.ctx
        side, path = ctx.test_side, ctx.git.path
        found = [] if by_checks else keep_side(path, self.pre, side, Keep.CODE)
        found += drop_new_ignored(path, side, self.ignored)
        found = [
            ctx.redactor.redact(p) + (" (written by a check)" if by_checks else "") for p in found
        ]
        if found:
            log.warning("test side reverted", extra={"run_id": ctx.spec.run_id, "paths": found})
        self.tests_reverted += found

    def _prompt_values(self, phase: str | None = None) -> dict[str, object]:
        ctx, record = self.ctx, self.record
        if phase is None:
            phase = "implement" if ctx.config.tests is TestsMode.FIRST else "together"
        return {
            "phase": phase,
            "frozen_tests": list(self.frozen.tests) if self.frozen else [],
            "test_paths": list(ctx.test_side.globs),
            "story": {
                "id": record.id,
                "title": record.title,
                "description": record.description,
                "acceptance_criteria": list(record.acceptance_criteria),
                "priority": record.priority,
                "notes": record.notes,
                "tests": list(record.tests),
                "changes_tests": [c.model_dump() for c in record.changes_tests],
                "review": prompt_view(record.source),  # FB-: the reviewers' words, quoted
            },
            "attempt": self.number,
            "max_attempts": ctx.config.max_story_retries,
            "feedback": (feedback(record.attempts[-1]) if record.attempts else None) or "",
            "progress": ctx.folder.progress(),
            "requirement": ctx.spec.requirement.text,
            "source": ctx.spec.requirement.source,
            "gates": ", ".join(f"{g.name}: `{g.command}`" for g in ctx.gates) or "none configured",
            "forbidden_paths": ctx.forbidden,
        }


def _gather(ctx: RunContext, pre: str) -> list[str]:
    """The agent's work staged on `pre`; the forbidden paths it wrote (reverted)."""
    touched = ctx.git.gather(pre, ctx.forbidden)
    # Recorded in the checkpoint and the log: an agent-made file name may hold a secret.
    touched = [ctx.redactor.redact(name) for name in touched]
    if touched:
        log.warning("forbidden paths reverted", extra={"run_id": ctx.spec.run_id, "paths": touched})
    return touched


def _reaching(
    ctx: RunContext, start: str, commit: str, outcome: AttemptOutcome, why: str
) -> tuple[AttemptOutcome, str]:
    """A pass whose code names its test runner's machinery, or adds a module that shadows
    one the checks import from elsewhere, needs review (runner_reach.py)."""
    if outcome is not AttemptOutcome.PASSED:
        return outcome, why
    found = what_reaches(ctx.git.path, start, commit, ctx.test_side, ctx.git.kept)
    if not found:
        return outcome, why
    return AttemptOutcome.NEEDS_REVIEW, _joined(why, reach_note(found))


def _tests_reverted_note(story_id: str, reverted: list[str]) -> str:
    if not reverted:
        return ""
    return f"{story_id} changed {', '.join(reverted)} while implementing: reverted"


def _joined(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _story_subject(record: StoryRecord) -> str:
    title = " ".join(record.title.split())  # one line: agent-written titles may hold newlines
    # Merged, a subject saying "Closes #2" would close issue 2: the agent's words stay inert.
    return f"feat: [{record.id}] - {neutralize(title)}"
