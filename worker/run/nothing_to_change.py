"""A tests call whose new tests already pass: the story judged done on the branch as it is."""

from __future__ import annotations

from typing import Any

from worker.model.gates import MISSING, TestStatus
from worker.model.state import AttemptOutcome, AttemptRecord, FrozenTests, StoryRecord
from worker.run.calls import run_gates_on
from worker.run.context import RunContext
from worker.run.selected import run_selected
from worker.verdict.judging import (
    KEPT,
    fail_fast_on,
    reference_gates,
    tests_by_id,
)
from worker.verdict.story_verdict import Evidence, added_by, decide_unchanged, proven_tests
from worker.verdict.tampering import changed_files, files_with_tests

# What the tests call's label gets for its checks on the base commit and at the head:
# iteration-3-tests.base.log, iteration-3-tests.head.log
AT_BASE = ".base"
AT_HEAD = ".head"


def already_done(
    ctx: RunContext,
    record: StoryRecord,
    *,
    start: str,
    label: str,
    frozen: FrozenTests,
    problems: list[str],
    fields: dict[str, Any],
) -> AttemptRecord | None:
    """The tests call wrote tests that pass without the story's code (refused as proof: they
    cannot fail→pass on this head). Before that refusal spends a retry, the story is judged
    on its tests at the head: "passed (nothing to change)" when tests that showed the work
    pass there and every other test still does. Tests that showed the work are the story's
    proven ones (failing at the baseline, or frozen by a kept attempt of it) and these new
    ones when each fails on the base commit, before any of the branch's work: the branch
    already does what they check. Shown so, the `test:` commit is kept (the story's commit);
    otherwise it is dropped and the story judged on its earlier tests alone. None: nothing
    shows the story done, and the refusal stands (its caller puts the worktree back)."""
    commit = frozen.commit
    new = list(frozen.tests)
    passing = [t for t in new if frozen.at_parent.get(t) == TestStatus.PASSED]
    if commit is None or not new or passing != new or len(problems) != len(new):
        return None  # another problem too, or a new test failing here: the story has work
    cp = ctx.cp
    at_base = _at_base(ctx, f"{label}{AT_BASE}", start, commit, new)
    shown = all(status == TestStatus.FAILED for status in at_base.values())
    earlier = proven_tests(record, tests_by_id(cp.baseline or []) or {})
    evidence = sorted({*earlier, *(new if shown else [])})
    if not evidence:
        return None
    if not shown:
        ctx.git.restore(start)
    gates = run_gates_on(ctx, f"{label}{AT_HEAD}", fail_fast=fail_fast_on(cp.baseline or []))
    if ctx.cancel.is_set():
        ctx.git.restore(start)
        return AttemptRecord(outcome=AttemptOutcome.CANCELLED, reason="cancelled", **fields)
    verdict = decide_unchanged(
        Evidence(
            reference_gates(cp.stories, cp.baseline or []),
            gates,
            [g.name for g in ctx.gates],
            owned={*record.tests, *evidence},
            proven=evidence,
            added_by=added_by(record),
        )
    )
    # A story added after the plan is never done with nothing changed: its tests passing at
    # the head are kept for a person to judge ("needs review", story_verdict.unproven).
    if verdict.outcome is not AttemptOutcome.NOTHING_TO_CHANGE and not (
        added_by(record) and verdict.outcome is AttemptOutcome.NEEDS_REVIEW
    ):
        ctx.git.restore(start)
        return None
    checks = [
        c.model_copy(update={"before": at_base[c.id]}) if shown and c.id in at_base else c
        for c in verdict.tests
    ]
    why = verdict.reason
    if shown:
        why += (
            f"; its new tests fail on the base commit {cp.base_sha[:12]}: the branch's "
            "earlier work does what they check"
        )
    else:
        why += "; its new tests passed on the base commit too, so they were not kept"
    return AttemptRecord(
        outcome=verdict.outcome,
        reason=why,
        commit=commit if shown else None,
        gates=gates,
        tests=checks,
        **fields,
    )


def _at_base(
    ctx: RunContext, label: str, start: str, commit: str, tests: list[str]
) -> dict[str, str]:
    """These tests run on the base commit with only their test files laid over it. A module
    that cannot be imported there is reported as one failure named after it: its tests
    failed there (as the parent proof reads it)."""
    changed = changed_files(ctx.git.path, start, commit)
    modules = {t.split("::", 1)[0] for t in tests}
    with ctx.git.parent_with(ctx.cp.base_sha, commit, files_with_tests(changed, tests)):
        found = run_selected(ctx, label, {*tests, *modules})
    return {t: found[t] if found[t] != MISSING else found[t.split("::", 1)[0]] for t in tests}


def kept_commit(record: StoryRecord, attempt: AttemptRecord) -> str | None:
    """The story's commit after an attempt with nothing to change and nothing committed: the
    commit of its last kept attempt before (a retry keeps its earlier work), else none."""
    if attempt.commit or attempt.outcome is not AttemptOutcome.NOTHING_TO_CHANGE:
        return attempt.commit
    kept = [a for a in [*record.earlier_attempts, *record.attempts] if a.outcome in KEPT]
    return next((a.commit for a in reversed(kept) if a.commit), None)
