"""The implement step: the next story by the worker's choice, one attempt at a time, until done."""

from __future__ import annotations

import time

from worker.exceptions import BudgetReached
from worker.model.state import (
    AttemptOutcome,
    AttemptRecord,
    StopReason,
    StoryRecord,
    StoryState,
    select_next_story,
)
from worker.run.attempt import StoryAttempt
from worker.run.calls import budget_reached, budget_stop
from worker.run.ci_story import reproduce_ci
from worker.run.context import RunContext
from worker.run.nothing_to_change import kept_commit
from worker.run.review_step import review_attempt
from worker.verdict.judging import KEPT, story_state


def implement(ctx: RunContext) -> StopReason:
    """Attempt stories until none is left, or the run is stopped, out of iterations or budget."""
    cp, config = ctx.cp, ctx.config
    while True:
        if ctx.cancel.is_set():
            return StopReason.CANCELLED
        if ctx.spec.superseded is not None and ctx.spec.superseded():
            return StopReason.SUPERSEDED
        story = select_next_story(cp.stories, max_story_retries=config.max_story_retries)
        if story is None:
            if all(s.state is StoryState.PASSED for s in cp.stories):
                return StopReason.ALL_STORIES_PASSED
            return StopReason.STORIES_SETTLED
        if cp.iteration - cp.retry_from >= config.max_iterations:
            return StopReason.MAX_ITERATIONS
        try:  # checked here and before the agent call itself (the month is shared)
            if (reached := budget_reached(ctx)) is not None:
                raise reached
            attempt_story(ctx, story)
        except BudgetReached as spent:
            ctx.folder.append_progress(str(spent))
            return budget_stop(spent)


def attempt_story(ctx: RunContext, record: StoryRecord) -> None:
    """One attempt at this story, recorded: its verdict, the story's state, the pushed branch."""
    cp, journal = ctx.cp, ctx.journal
    reproduce_ci(ctx, record)  # a CI-fix story's tests, found before its first attempt
    cp.iteration += 1
    iteration, number = cp.iteration, len(record.attempts) + 1
    journal.save()  # a kill from here on shows which iteration was interrupted
    ctx.reporter.story_started(record, number, iteration)
    started, pre = time.monotonic(), cp.head_sha
    attempt = StoryAttempt(ctx, record, iteration=iteration, number=number).run()
    attempt.duration_s = round(time.monotonic() - started, 3)
    attempt = review_attempt(ctx, record, attempt, start=pre)  # its own time, in attempt.review
    ctx.folder.append_progress(_progress_line(record, attempt))
    if attempt.outcome is AttemptOutcome.CANCELLED:
        # Not the agent's failure: it does not use up one of the story's attempts.
        journal.save()
        ctx.reporter.story_finished(record, attempt)
        return
    record.attempts.append(attempt)
    record.state = story_state(attempt.outcome, number, ctx.config.max_story_retries)
    if attempt.outcome in KEPT:
        record.commit = kept_commit(record, attempt)
        cp.head_sha = attempt.commit or cp.head_sha
    journal.save()
    if cp.head_sha != cp.pushed_sha and cp.head_sha != cp.base_sha:
        journal.pushed(ctx.git.push())
    journal.write_prd()
    journal.write_run_json()
    ctx.reporter.story_finished(record, attempt)


def _progress_line(record: StoryRecord, attempt: AttemptRecord) -> str:
    commit = f" commit {attempt.commit[:12]}" if attempt.commit else ""
    forbidden = (
        f"; reverted forbidden writes: {', '.join(attempt.forbidden_writes)}"
        if attempt.forbidden_writes
        else ""
    )
    why = f" ({attempt.reason})" if attempt.reason else ""
    return (
        f"iteration {attempt.iteration}: {record.id} attempt {attempt.attempt}: "
        f"{attempt.outcome}{why}{commit}{forbidden}"
    )
