"""The baseline step: the gates where the stories start, measured once per run."""

from __future__ import annotations

from worker.exceptions import RunCancelled
from worker.model.gates import GateResult
from worker.run.calls import run_gates_on
from worker.run.context import RunContext


def measure_baseline(ctx: RunContext) -> None:
    """The checkpoint's baseline, unless it has one; refused when the run is cancelled."""
    cp = ctx.cp
    if cp.baseline is None:
        baseline = _baseline(ctx)
        # Gates stopped part-way measured nothing: a resumed run measures them again.
        cp.baseline = None if ctx.cancel.is_set() else baseline
    if ctx.cancel.is_set():
        raise RunCancelled(
            "the run was cancelled while measuring the base commit; no plan was made"
        )


def _baseline(ctx: RunContext) -> list[GateResult]:
    """The gates where the stories start: what "no worse than before" means for every story.

    That is the base commit, or the branch's head when an earlier run of this requirement
    (before its text was edited) left commits there: the stories build on that head, so
    its tests are nobody's new tests and must not be judged as a story's."""
    if not ctx.gates:
        return []
    results = run_gates_on(ctx, "baseline", fail_fast=False)
    if not ctx.cancel.is_set():  # stopped gates say nothing about the starting commit
        on_base = ctx.git.head() == ctx.cp.base_sha
        ctx.folder.append_progress(
            f"baseline on {'the base commit' if on_base else 'the branch head'}: "
            + ", ".join(f"{g.name} {'passes' if g.passed else 'FAILS'}" for g in results)
        )
    return results
