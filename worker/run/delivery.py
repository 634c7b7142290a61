"""The verify and deliver steps: the final gates, the run's result, and what it leaves behind."""

from __future__ import annotations

import time
from collections.abc import Sequence

from worker.model.gates import GateResult
from worker.model.state import Checkpoint, RunResult, RunStatus, RunStep, StopReason, StoryState
from worker.report.pr_body import render_pr_body
from worker.report.run_folder import CHANGES_PATCH, PR_BODY, VERIFICATION_SUMMARY, RunFolder
from worker.run.calls import run_gates_on
from worker.run.context import RunContext
from worker.run.review_step import review_whole
from worker.verdict.base_debt import base_debt
from worker.verdict.judging import (
    baseline_changes,
    final_failures,
    readiness,
    tests_by_id,
    unclaimed,
)
from worker.verdict.story_verdict import ready_after_review


def verify(ctx: RunContext) -> list[GateResult]:
    """Every gate on the branch's head: the final checks."""
    ctx.git.restore(ctx.cp.head_sha)
    return run_gates_on(ctx, "verification", fail_fast=False)


def deliver(ctx: RunContext, final: list[GateResult], stop: StopReason) -> RunResult:
    """The run's result, its summary, patch and PR body written; the run finished."""
    cp, journal = ctx.cp, ctx.journal
    result = run_result(
        cp,
        final,
        project=journal.prd.project,
        expected_gates=[g.name for g in ctx.gates],
        stop=stop,
        duration_s=time.monotonic() - ctx.started,
        run_dir=str(ctx.folder.path),
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
