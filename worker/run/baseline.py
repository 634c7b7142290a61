"""The baseline step: the gates where the stories start, measured once per run."""

from __future__ import annotations

from pathlib import Path

from worker.exceptions import ChecksCannotStart, RunCancelled
from worker.model.gates import GateResult
from worker.run.calls import run_gates_on
from worker.run.context import RunContext
from worker.run.setup import set_up
from worker.verdict.unstartable import GatePlace, cannot_start


def measure_baseline(ctx: RunContext) -> None:
    """The repository's setup, then the checkpoint's baseline unless it has one; refused
    when the run is cancelled."""
    cp = ctx.cp
    set_up(ctx)  # every time: a resumed run's worktree is a fresh checkout
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
        _check_started(ctx, results)
        on_base = ctx.git.head() == ctx.cp.base_sha
        ctx.folder.append_progress(
            f"baseline on {'the base commit' if on_base else 'the branch head'}: "
            + ", ".join(f"{g.name} {'passes' if g.passed else 'FAILS'}" for g in results)
        )
    return results


def _check_started(ctx: RunContext, results: list[GateResult]) -> None:
    """Stop the run when a gate never started (its program or runner missing): every story
    would be judged on a check that cannot run."""
    place = GatePlace(
        sandboxed=ctx.spec.sandbox is not None,
        gate_path=ctx.gate_env.get("PATH", ""),
        worker_path=ctx.spec.source_env.get("PATH", ""),
        keep_out=[Path(ctx.spec.work_dir).absolute()],
    )
    reasons = [why.sentence() for r in results if (why := cannot_start(r, place)) is not None]
    if reasons:
        ctx.folder.append_progress("baseline: " + "; ".join(reasons))
        raise ChecksCannotStart("; ".join(reasons))
