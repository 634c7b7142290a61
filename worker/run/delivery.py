"""The verify and deliver steps: the final gates, the run's result, and what it leaves behind."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from worker.model.gates import GateResult, GateSpec, is_partial
from worker.model.state import Checkpoint, RunResult, RunStatus, RunStep, StopReason, StoryState
from worker.report.pr_body import render_pr_body
from worker.report.run_folder import CHANGES_PATCH, PR_BODY, VERIFICATION_SUMMARY, RunFolder
from worker.run.calls import run_gates_on
from worker.run.context import RunContext
from worker.run.end_bisect import trace_breaks
from worker.run.review_step import review_whole
from worker.verdict.base_debt import base_debt
from worker.verdict.flaky import flaky_in
from worker.verdict.judging import KEPT, tests_by_id
from worker.verdict.readiness import baseline_changes, final_failures, readiness, unclaimed
from worker.verdict.story_verdict import ready_after_review


@dataclass(frozen=True)
class Verification:
    """The final checks' results, and where they came from when they were not run again."""

    gates: list[GateResult]
    reused_from: str | None = None


def verify(ctx: RunContext) -> Verification:
    """Every gate on the branch's head: the final checks. A head already judged with the same
    gates (the kept attempt that made it, or the baseline when no story was kept) is not
    judged again: that run's results are the final ones, and the summary says so. After
    stories judged on part of the suite, a test the final checks find broken is traced to
    the story that broke it (end_bisect.py)."""
    judged = judged_results(ctx.cp, ctx.gates)
    if judged is not None:
        ctx.folder.append_progress(f"verification: the head's results from {judged.reused_from}")
        ctx.reporter.gates_finished("verification.reused", judged.gates, 0.0)
    else:
        ctx.git.restore(ctx.cp.head_sha)
        judged = Verification(run_gates_on(ctx, "verification", fail_fast=False))
    # Stories judged on part of the suite answer to the whole suite here.
    if not ctx.cancel.is_set() and trace_breaks(ctx, judged.gates):
        ctx.journal.save()
    return judged


def judged_results(cp: Checkpoint, gates: Sequence[GateSpec]) -> Verification | None:
    """The results that judged the head commit with exactly these gates (every one of them,
    with the same name and command, in order), or None."""
    made_head = [
        (a.iteration, f"iteration {a.iteration} ({s.id} attempt {a.attempt})", a.gates)
        for s in cp.stories
        for a in [*s.earlier_attempts, *s.attempts]
        if a.commit == cp.head_sha and a.outcome in KEPT
    ]
    if made_head:
        _, source, results = max(made_head, key=lambda found: found[0])
    elif cp.baseline is not None and cp.baseline_sha == cp.head_sha:
        source, results = "the baseline", cp.baseline
    else:
        return None
    wanted = [(g.name, g.command) for g in gates]
    if not wanted or [(g.name, g.command) for g in results] != wanted:
        return None
    if is_partial(results):  # it ran the tests its change reaches: the head is not judged
        return None
    return Verification(list(results), source)


def deliver(ctx: RunContext, final: Verification, stop: StopReason) -> RunResult:
    """The run's result, its summary, patch and PR body written; the run finished."""
    cp, journal = ctx.cp, ctx.journal
    result = run_result(
        cp,
        final.gates,
        project=journal.prd.project,
        expected_gates=[g.name for g in ctx.gates],
        stop=stop,
        duration_s=time.monotonic() - ctx.started,
        run_dir=str(ctx.folder.path),
        final_gates_from=final.reused_from,
    )
    if result.ready:  # the blind review of the whole change, before the PR is marked ready
        whole = review_whole(ctx)
        why = ready_after_review(whole)
        update: dict[str, object] = {"review": whole, "cost_usd": round(cp.cost_usd, 4)}
        update |= {"ready": False, "draft_reason": why} if why else {}
        result = result.model_copy(update=update)
    diff = ctx.git.diff(cp.base_sha, cp.head_sha)
    write_delivery(ctx.folder, result, iterations=cp.iteration, diff=diff)
    cp.status, cp.step = RunStatus.FINISHED, RunStep.DONE
    journal.step = RunStep.DONE
    journal.save()
    journal.write_run_json()
    return result


def run_result(
    cp: Checkpoint,
    final: list[GateResult],
    *,
    project: str,
    expected_gates: Sequence[str],
    stop: StopReason,
    duration_s: float,
    run_dir: str,
    final_gates_from: str | None = None,
) -> RunResult:
    """What the run did, judged: which stories passed, which baseline failures it fixed,
    ready for review or a draft and why."""
    fixed, remaining = baseline_changes(cp.baseline or [], final)
    ready, why = readiness(
        cp.stories, final, expected_gates=expected_gates, stop=stop, baseline=cp.baseline or []
    )
    return RunResult(
        run_id=cp.run_id,
        requirement_source=cp.requirement_source,
        project=project,
        branch=cp.branch,
        base_ref=cp.base_ref,
        base_sha=cp.base_sha,
        head_sha=cp.head_sha,
        start_sha=cp.start_sha,
        stories=cp.stories,
        final_gates=final,
        baseline_gates=cp.baseline or [],
        fixed_tests=fixed,
        remaining_tests=remaining,
        still_failing=final_failures(cp.stories, cp.baseline or [], final),
        unclaimed_tests=unclaimed(cp.stories, cp.baseline or []),
        failing_on_base=base_debt(cp.baseline or [], final),
        per_test_results=any(
            tests_by_id(gates) is not None for gates in (cp.baseline or [], final)
        ),
        flaky_tests=flaky_in(cp.stories),
        final_gates_from=final_gates_from,
        baseline_cached=cp.baseline_cached,
        ready=ready,
        draft_reason=why,
        stop_reason=stop,
        cost_usd=round(cp.cost_usd, 4),
        duration_s=round(duration_s, 3),
        run_dir=run_dir,
    )


def write_delivery(folder: RunFolder, result: RunResult, *, iterations: int, diff: str) -> None:
    """verification-summary.json, changes.patch (the branch's diff) and pr.md."""
    folder.write_json(VERIFICATION_SUMMARY, verification_summary(result, iterations))
    folder.write_text(CHANGES_PATCH, diff + "\n" if diff else "")
    folder.write_text(PR_BODY, render_pr_body(result))
    folder.sweep(full=True)


def verification_summary(result: RunResult, iterations: int) -> dict[str, object]:
    """The run's verdict as plain JSON, for machines reading the run folder."""
    return {
        "run_id": result.run_id,
        "branch": result.branch,
        "base_sha": result.base_sha,
        "head_sha": result.head_sha,
        "stories": {
            "total": len(result.stories),
            **{str(state): result.count(state) for state in StoryState},
            "by_id": {s.id: str(s.state) for s in result.stories},
        },
        "iterations": iterations,
        "gates": [g.model_dump(exclude={"output_tail"}) for g in result.final_gates],
        # Not run again when the head was already judged with the same gates: whose they are.
        "gates_reused_from": result.final_gates_from,
        "baseline_from_cache": result.baseline_cached,
        "flaky_tests": result.flaky_tests,
        "all_gates_passed": all(g.passed for g in result.final_gates),
        "baseline_fixed_tests": result.fixed_tests,
        "baseline_remaining_tests": result.remaining_tests,
        "still_failing": result.still_failing,
        "unclaimed_tests": result.unclaimed_tests,
        "failing_on_base": result.failing_on_base,
        "per_test_results": result.per_test_results,
        # The blind review (a model's opinion): each story's last, and the whole change's.
        "review": {
            "stories": {
                s.id: s.attempts[-1].review.headline()
                for s in result.stories
                if s.attempts and s.attempts[-1].review is not None
            },
            "whole_change": result.review.headline() if result.review else None,
        },
        "ready": result.ready,
        "draft_reason": result.draft_reason,
        "stop_reason": str(result.stop_reason),
        "cost_usd": result.cost_usd,
    }
