"""The plan step: the run's stories, from the agent or from a reviewed plan."""

from __future__ import annotations

from worker.exceptions import PreflightError
from worker.model.prd import Prd, parse_prd
from worker.model.state import StoryRecord
from worker.plan.planning import Planner, check_test_claims
from worker.report.story_states import count_stories
from worker.run.calls import call_agent
from worker.run.context import RunContext
from worker.run.replan import carry_over, earlier_plan_text, earlier_run
from worker.verdict.judging import tests_by_id
from worker.verdict.readiness import unclaimed


def make_plan(ctx: RunContext) -> None:
    """The checkpoint's plan, unless it has one that a reviewed plan does not replace."""
    if ctx.cp.prd is not None and not _replaces_plan(ctx):
        return
    if ctx.spec.plan_text is not None:
        _adopt_plan(ctx, _reviewed_plan(ctx, ctx.spec.plan_text))
        return
    cp = ctx.cp
    planner = Planner(
        worktree=ctx.git.path,
        handoff=ctx.places.handoff,
        branch=cp.branch,
        folder=ctx.folder,
        renderer=ctx.renderer,
        call_agent=lambda label, prompt: call_agent(ctx, label, prompt),
        timeout_s=ctx.agent.timeout_s,
        redactor=ctx.redactor,
        cancel=ctx.cancel,
        baseline_tests=tests_by_id(cp.baseline or []),
    )
    earlier = earlier_run(ctx)
    values = {
        "requirement": ctx.spec.requirement.text,
        "source": ctx.spec.requirement.source,
        "project": ctx.config.project_name or "",
        "earlier_plan": earlier_plan_text(earlier),
    }
    _adopt_plan(ctx, planner.plan(values, on_attempt=lambda n: _planning_attempt(ctx, n)))
    if earlier is not None and carry_over(ctx, earlier):
        ctx.journal.write_prd()
        ctx.journal.save()


def _replaces_plan(ctx: RunContext) -> bool:
    """A reviewed plan replaces the run's own only before any story was tried."""
    if ctx.spec.plan_text is None:
        return False
    if any(s.attempts for s in ctx.cp.stories):
        raise PreflightError(
            f"run {ctx.spec.run_id} has already worked on its stories; start a new run "
            "with --run-id to use this plan"
        )
    return True


def _reviewed_plan(ctx: RunContext, text: str) -> Prd:
    prd = parse_prd(text)
    check_test_claims(prd, tests_by_id(ctx.cp.baseline or []))
    ctx.folder.append_progress("plan: read from the reviewed plan given with --plan")
    return prd


def _adopt_plan(ctx: RunContext, prd: Prd) -> None:
    cp = ctx.cp
    cp.prd = prd
    cp.stories = [StoryRecord.model_validate(s.model_dump()) for s in prd.user_stories]
    ctx.journal.write_prd()
    ctx.folder.append_progress(
        f"plan: {count_stories(len(prd.user_stories))} " + ", ".join(s.id for s in prd.user_stories)
    )
    left = unclaimed(cp.stories, cp.baseline or [])
    if left:
        ctx.folder.append_progress(
            f"no story claims {len(left)} failing tests; they stay final checks: "
            + ", ".join(left[:20])
            + (" ..." if len(left) > 20 else "")
        )
    ctx.journal.save()


def _planning_attempt(ctx: RunContext, number: int) -> None:
    ctx.cp.plan_attempts = number
    ctx.journal.save()
