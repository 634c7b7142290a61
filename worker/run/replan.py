"""An edited requirement's plan: the earlier text's stories kept where the edit left them."""

from __future__ import annotations

import json

from worker.model.prd import Story
from worker.model.state import Checkpoint, StoryRecord
from worker.run.context import RunContext
from worker.run.resume import unproven_stories

# What a story is, for "did the edit change it": its plan's words, not its order or the ids of
# the base commit's failing tests (the branch's head, where an edit's run is planned, passes
# the tests an earlier story made pass, so a plan cannot claim them again).
SAME_STORY_FIELDS = ("title", "description", "acceptance_criteria", "notes", "changes_tests")
EARLIER_PLAN_CHARS = 60_000  # of the earlier plan, in the planning prompt


def earlier_run(ctx: RunContext) -> Checkpoint | None:
    """The checkpoint of the run of this requirement's earlier text on the same branch (the
    App's run of an edited requirement names it), with its plan; None when there is none."""
    name = ctx.spec.previous_run
    if not name or name == ctx.spec.run_id:
        return None
    earlier = ctx.journal.store.load(name)
    if earlier is None or earlier.prd is None or earlier.branch != ctx.cp.branch:
        return None
    return earlier


def earlier_plan_text(earlier: Checkpoint | None) -> str:
    """The earlier plan for the planning prompt: each story as planned, with its state."""
    if earlier is None:
        return ""
    stories = [
        {**_planned(s).model_dump(by_alias=True, mode="json"), "state": str(s.state)}
        for s in earlier.stories
    ]
    return json.dumps({"userStories": stories}, indent=2, ensure_ascii=False)[:EARLIER_PLAN_CHARS]


def carry_over(ctx: RunContext, earlier: Checkpoint) -> list[str]:
    """The new plan's stories the edit left as they were take the earlier run's record (state,
    attempts, commit, frozen tests): they are not built again. The ids carried.

    A carried story claiming a commit the branch does not hold (a person rewrote it) is
    pending again, as on a resume. The iterations go on from the earlier run's, so the latest
    kept attempt stays what the next story is judged against; the stories count as started
    where the earlier run's did (the whole change is reviewed from there)."""
    cp = ctx.cp
    before = {s.id: s for s in earlier.stories}
    carried = []
    for index, story in enumerate(cp.stories):
        old = before.get(story.id)
        if old is None or not _same(old, story) or not old.attempts:
            continue
        cp.stories[index] = old.model_copy(update={"priority": story.priority}, deep=True)
        carried.append(story.id)
    if not carried:
        return []
    cp.iteration = max(cp.iteration, earlier.iteration)
    cp.retry_from = cp.iteration
    cp.start_sha = earlier.start_sha
    reset = set(unproven_stories(ctx.git, cp))
    kept = [i for i in carried if i not in reset]
    ctx.folder.append_progress(
        "edited requirement: kept from run "
        + f"{earlier.run_id}, unchanged by the edit: "
        + (", ".join(f"{i} ({cp.story(i).state})" for i in kept) or "none")
        + (
            f"; pending again (their commits are not on the branch): {', '.join(sorted(reset))}"
            if reset
            else ""
        )
    )
    return kept


def _same(old: StoryRecord, new: StoryRecord) -> bool:
    return all(getattr(old, f) == getattr(new, f) for f in SAME_STORY_FIELDS)


def _planned(record: StoryRecord) -> Story:
    return Story.model_validate(record.model_dump(include=set(Story.model_fields)))
