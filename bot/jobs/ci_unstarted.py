"""A CI-fix run that stopped before its story: no attempt spent, the story taken back, PR told.

The run of a CI-fix story can fail before the worker starts the story (its workspace: a clone
or fetch refused, the disk full; or the steps after it before the story). Nothing was tried, so
it is none of `ciFixAttempts`: the story leaves the plan (the next CI failure adds its own, not
a second beside it), the attempt is given back with the head's claim, and the pull request says
what stopped it. When another run took the run's lock first, it runs the story: that counts.
"""

from __future__ import annotations

import logging

from bot.github.client import RepoClient
from bot.github.progress import inline_code
from bot.jobs.drive import AlreadyRunning, run_lock
from bot.jobs.job_frame import Answer, reply
from bot.jobs.runtime import Runtime
from bot.requests import RunRequest
from bot.stores.ci_fixes import CiFixes
from bot.stores.runs import RunRecord
from worker.model.state import Checkpoint, RunStatus, StoryRecord, StoryState

log = logging.getLogger(__name__)

NOT_STARTED = (
    "⚠️ reqdrive could not start {story}, its fix for CI failing on `{sha}`: the run stopped "
    "{where}, before the story. It is not counted as one of the `ciFixAttempts` ({spent} "
    "used); when CI fails on this pull request again (re-run the failed jobs), reqdrive tries "
    "again."
)


def _started(story: StoryRecord) -> bool:
    """Did the run get to the story: an attempt made, or CI's tests run before the first?"""
    reproduced = story.ci is not None and story.ci.reproduced is not None
    return bool(story.attempts) or reproduced or story.state is not StoryState.PENDING


def take_back_unstarted(
    rt: Runtime, client: RepoClient, record: RunRecord, request: RunRequest, story_id: str
) -> Answer | None:
    """When the failed run never started `story_id`: taken back and said (the job's answer);
    None when it did, or another run holds it now."""
    try:
        with run_lock(rt, record):
            cp = rt.checkpoints.load(record.run_id)
            story = _story(cp, story_id)
            if cp is None or story is None or _started(story):
                return None
            _drop_story(cp, story_id)
            rt.checkpoints.save(cp)
    except AlreadyRunning:  # another run took the run over: the story is its to run
        return None
    number, sha = request.issue_number or 0, request.head_sha or ""
    spent = CiFixes(rt.conn).give_back(request.repo, number, sha)
    where = _where(cp)
    log.info(
        "ci fix not started: no attempt counted",
        extra={"run_id": record.run_id, "story": story_id, "step": str(cp.step)},
    )
    text = NOT_STARTED.format(story=story_id, sha=sha[:12], where=where, spent=spent)
    reply(client, request, text)
    return {"status": "not started", "run_id": record.run_id, "story": story_id, "at": where}


def _story(cp: Checkpoint | None, story_id: str) -> StoryRecord | None:
    return next((s for s in cp.stories if s.id == story_id), None) if cp else None


def _drop_story(cp: Checkpoint, story_id: str) -> None:
    cp.stories = [s for s in cp.stories if s.id != story_id]
    if cp.prd is not None:
        kept = [s for s in cp.prd.user_stories if s.id != story_id]
        cp.prd = cp.prd.model_copy(update={"user_stories": kept})


def _where(cp: Checkpoint) -> str:
    """The step and error the checkpoint recorded; a run that failed before it had its
    checkpoint in hand (the disk check, its token) left them to the check run."""
    if cp.status is RunStatus.FAILED and cp.error:
        return f"at its {cp.step} step (`{inline_code(cp.error)[:500]}`)"
    return "as it started (the `reqdrive` check run on the head says why)"
