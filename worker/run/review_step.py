"""The review step: after a story's tests pass, and once for the whole change before delivery."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Sequence
from pathlib import Path

from worker.model.review import ReviewOutcome, ReviewRecord
from worker.model.state import AttemptOutcome, AttemptRecord, StoryRecord
from worker.review.triangular import ReviewAgent, ReviewDesk, ReviewSubject, review
from worker.run.calls import budget_reached, call_reviewer
from worker.run.context import RunContext
from worker.verdict.judging import KEPT
from worker.verdict.story_verdict import StoryVerdict, decide_reviewed

WHOLE_LABEL = "requirement"


def review_attempt(
    ctx: RunContext, record: StoryRecord, attempt: AttemptRecord, *, start: str
) -> AttemptRecord:
    """A passed attempt reviewed blind and decided again (decide_reviewed); any other attempt,
    or every attempt with `review: off`, as it was. The reviewer is shown the story's whole
    change from `start` (the commit the story started on): its frozen tests and its code.

    A commit the review sends back is dropped like a failed attempt's: its patch stays in the
    run folder, the worktree goes back to `start`, and the story keeps its frozen tests
    (record.frozen): the next attempt checks them out again and makes no tests call."""
    if ctx.review is None or attempt.outcome is not AttemptOutcome.PASSED or not attempt.commit:
        return attempt
    subject = ReviewSubject(
        label=f"{record.id}.iteration-{attempt.iteration}",
        title=record.id,
        base=start,
        head=attempt.commit,
        criteria=list(record.acceptance_criteria),
        requirement=ctx.spec.requirement.text,
        source=ctx.spec.requirement.source,
        hidden_texts=_plan_texts(ctx.cp.stories),
        hidden_paths=_hidden_paths(ctx),
    )
    found = _run(ctx, ctx.review, subject)
    if ctx.cancel.is_set():
        ctx.git.restore(start)
        return attempt.model_copy(
            update={"outcome": AttemptOutcome.CANCELLED, "reason": "cancelled", "review": found}
        )
    verdict = decide_reviewed(
        StoryVerdict(attempt.outcome, attempt.reason, attempt.tests),
        found,
        number=attempt.attempt,
        max_retries=ctx.config.max_story_retries,
    )
    kept = verdict.outcome in KEPT
    if not kept:
        patch = ctx.folder.patch_path(attempt.iteration).name
        ctx.folder.write_text(patch, ctx.git.diff(start, attempt.commit) + "\n")
        ctx.git.restore(start)
    return attempt.model_copy(
        update={
            "outcome": verdict.outcome,
            "reason": verdict.reason,
            "commit": attempt.commit if kept else None,
            "review": found,
        }
    )


def review_whole(ctx: RunContext) -> ReviewRecord | None:
    """The whole change, from where the stories started to the head, against the criteria of
    every story whose change was reviewed: run once the stories and final checks would make
    the PR ready. None with `review: off`, or with no reviewed change (every story passed
    with nothing to change: a blind reviewer of an empty diff could show no criterion)."""
    cp = ctx.cp
    start = cp.start_sha or cp.base_sha
    reviewed = [s for s in cp.stories if s.attempts and s.attempts[-1].review is not None]
    if ctx.review is None or not reviewed or cp.head_sha == start:
        return None
    if (same := _one_story_change(cp.stories, start, cp.head_sha)) is not None:
        ctx.folder.append_progress(
            f"review of the whole requirement: {same.headline()} (its story's)"
        )
        return same
    subject = ReviewSubject(
        label=WHOLE_LABEL,
        title="the whole requirement",
        base=start,
        head=cp.head_sha,
        criteria=[c for s in reviewed for c in s.acceptance_criteria],
        requirement=ctx.spec.requirement.text,
        source=ctx.spec.requirement.source,
        hidden_texts=_plan_texts(cp.stories),
        hidden_paths=_hidden_paths(ctx),
    )
    return _run(ctx, ctx.review, subject)


def _one_story_change(stories: Sequence[StoryRecord], start: str, head: str) -> ReviewRecord | None:
    """The review of the one story whose change is the whole change (the only commit kept,
    the head, reviewed from `start`), or None: asked again, the reviewers would be shown the
    same diff against the same criteria."""
    kept = [(s, a) for s in stories for a in s.attempts if a.outcome in KEPT and a.commit]
    if len(kept) != 1:
        return None
    story, attempt = kept[0]
    started = story.frozen.parent if story.frozen is not None else None
    if attempt.commit != head or attempt.review is None or started != start:
        return None
    return attempt.review


def _run(ctx: RunContext, agent: ReviewAgent, subject: ReviewSubject) -> ReviewRecord:
    """One review, each of its calls counted in the run's cost and the shared budget as it
    ends. With a budget already spent it does not start, and one spent during it stops it:
    the change stays unreviewed, said in the record."""
    if (reached := budget_reached(ctx)) is not None:
        found = ReviewRecord(outcome=ReviewOutcome.INCOMPLETE, problem=str(reached))
        ctx.folder.append_progress(f"review of {subject.title}: {found.headline()}")
        return found
    root = review_root(ctx.spec.work_dir, ctx.spec.run_id)
    shutil.rmtree(root, ignore_errors=True)  # what a killed run left
    root.mkdir(parents=True)
    desk = ReviewDesk(
        agent=agent,
        sandbox=ctx.spec.sandbox,
        worktree=ctx.git.path,
        root=root,
        folder=ctx.folder,
        cancel=ctx.cancel,
        # Each reviewer's call under the run's checks, its cost the run's as it ends:
        # budgetUsd and the installation's month count it, and stop the next call.
        run_call=lambda runner, call: call_reviewer(ctx, runner, call, (root,)),
    )
    try:
        found = review(desk, subject)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        ctx.folder.sweep()
    ctx.folder.append_progress(f"review of {subject.title}: {found.headline()}")
    return found


def review_root(work_dir: Path, run_id: str) -> Path:
    """The reviewers' folder of a run, named by a hash: a run id is often the requirement's
    slug, and a reviewer sees its own paths."""
    return work_dir / "reviews" / hashlib.sha256(run_id.encode()).hexdigest()[:16]


def _plan_texts(stories: Sequence[StoryRecord]) -> list[str]:
    """What the plan says of every story: none of it may reach the blind reviewer."""
    texts: list[str] = []
    for story in stories:
        texts += [story.title, story.description, story.notes, *story.acceptance_criteria]
    return texts


def _hidden_paths(ctx: RunContext) -> list[str]:
    path = ctx.spec.requirement.repo_path
    return [path] if path else []
