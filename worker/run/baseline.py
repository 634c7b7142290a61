"""The baseline step: the gates where the stories start, measured once per run."""

from __future__ import annotations

from pathlib import Path

from worker.exceptions import ChecksCannotStart, RunCancelled
from worker.model.gates import GateResult
from worker.run.baseline_cache import BaselineCache, baseline_key
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
        cp.baseline_sha = ctx.git.head()
        baseline = _baseline(ctx, cp.baseline_sha)
        # Gates stopped part-way measured nothing: a resumed run measures them again.
        cp.baseline = None if ctx.cancel.is_set() else baseline
    if ctx.cancel.is_set():
        raise RunCancelled(
            "the run was cancelled while measuring the base commit; no plan was made"
        )


def _baseline(ctx: RunContext, head: str) -> list[GateResult]:
    """The gates on `head`, where the stories start: what "no worse than before" means for
    every story.

    That is the base commit, or the branch's head when an earlier run of this requirement
    (before its text was edited) left commits there: the stories build on that head, so
    its tests are nobody's new tests and must not be judged as a story's.

    A base commit an earlier run measured, with the same tree, gates, config, tools and
    sandbox (baseline_key), is not measured again: its results come from the work dir's
    cache, and the checkpoint (run.json, the PR) says so. Only the base commit's results are
    saved: a branch head holds the agent's commits, whose code ran in the gates."""
    if not ctx.gates:
        return []
    cp = ctx.cp
    on_base = head == cp.base_sha
    cache, key = BaselineCache(ctx.spec.work_dir / "baseline-cache"), baseline_key(ctx, head)
    cached = cache.load(key) if on_base else None
    if cached is not None:
        cp.baseline_cached = f"{key[:12]}, measured by run {cached.measured_by}"
        results = cached.gates
        ctx.folder.write_json("baseline.gates.json", [r.to_json() for r in results])
        ctx.reporter.gates_finished("baseline.cached", results, 0.0)
    else:
        results = run_gates_on(ctx, "baseline", fail_fast=False)
        if ctx.cancel.is_set():  # stopped gates say nothing about the starting commit
            return results
        _check_started(ctx, results)
        if on_base:
            cache.save(key, results, measured_by=ctx.spec.run_id)
    ctx.folder.append_progress(
        f"baseline on {'the base commit' if on_base else 'the branch head'}"
        + (f" (from the cache: {cp.baseline_cached})" if cached is not None else "")
        + ": "
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
