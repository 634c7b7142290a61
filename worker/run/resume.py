"""Resuming a run: the same requirement, nothing left running, the branch where it stopped."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import psutil

from worker.confine.processes import marked_processes
from worker.exceptions import PreflightError, ResumeError
from worker.git.changes import RunWorktree
from worker.model.state import AttemptOutcome, Checkpoint, StoryRecord, StoryState


def check_requirement(cp: Checkpoint, sha256: str) -> None:
    """Refuse to resume a run whose requirement text changed since it started."""
    if cp.requirement_sha256 != sha256:
        raise PreflightError(
            f"the requirement changed since run {cp.run_id} started; start a new run "
            "(another run id) to build the new version on the same branch"
        )


def stop_leftovers(worktree: Path) -> list[int]:
    """Kill what a killed worker left running in this run's worktree, before it is reused.

    A SIGKILLed worker cannot stop its agent, which runs in a session of its own and would go
    on writing into the worktree the resumed run works in. Only processes started through
    run_process (they carry its marker) with their working directory in the worktree count, so
    a person's shell looking around in there is left alone.
    """
    own, stopped = os.getpid(), []
    for process in marked_processes():
        if process.pid == own:
            continue
        try:
            cwd = Path(process.cwd())
        except psutil.Error:  # gone already, or not ours to inspect
            continue
        if cwd == worktree or worktree in cwd.parents:
            with contextlib.suppress(psutil.Error):
                process.kill()
                stopped.append(process.pid)
    return stopped


def reconcile(git: RunWorktree, cp: Checkpoint) -> bool:
    """Check the branch is where the checkpoint left it before building on it; True when the
    remote branch still lacks the checkpoint's head (it needs a push)."""
    local, remote = git.head(), git.remote_head()
    mismatch = (
        f"run {cp.run_id} cannot resume: its checkpoint says branch {cp.branch} is at "
        f"{cp.head_sha[:12]}, but the branch is at {{}}. The branch was changed outside "
        "this run; start a new run (another run id) or restore the branch."
    )
    if remote and not git.is_ancestor(remote, cp.head_sha):
        raise ResumeError(mismatch.format(f"{remote[:12]} on the remote"))
    if local != cp.head_sha:
        # Two ways to be elsewhere that the run itself explains: commits past the
        # checkpoint from an attempt interrupted before the worker judged it (never kept),
        # or a fresh worktree at the remote head when the last push did not happen.
        interrupted = git.is_ancestor(cp.head_sha, local)
        unpushed = git.is_ancestor(local, cp.head_sha)
        if not (interrupted or unpushed):
            raise ResumeError(mismatch.format(local[:12]))
        git.reset_to(cp.head_sha)
    return remote != cp.head_sha and cp.head_sha != cp.base_sha


# Each story commit names its story: a resumed run believes a checkpoint's "passed" only for
# stories whose commit is on the branch with this trailer.
STORY_TRAILER = "Reqdrive-Story"
# States that claim a commit on the branch.
COMMITTED_STATES = (StoryState.PASSED, StoryState.NEEDS_REVIEW, StoryState.UNVERIFIED)


def story_trailer(story_id: str) -> str:
    return f"{STORY_TRAILER}: {story_id}"


def unproven_stories(git: RunWorktree, cp: Checkpoint) -> list[str]:
    """Put back to pending every story the checkpoint calls done whose commit the branch does
    not hold (between the base and the checkpoint's head, with its story trailer); their ids.

    The checkpoint is the run's own record, out of the agent's reach in a sandbox; this is
    what catches one rewritten anyway (unsandboxed, or by hand): "all passed", no commits.
    """
    on_branch = git.trailers(STORY_TRAILER, cp.base_sha, cp.head_sha)
    reset = []
    for story in cp.stories:
        if story.state not in COMMITTED_STATES or _nothing_committed(story):
            continue
        if story.commit is None or on_branch.get(story.commit) != story.id:
            story.state, story.commit = StoryState.PENDING, None
            reset.append(story.id)
    return reset


def _nothing_committed(story: StoryRecord) -> bool:
    """Passed with nothing to change and no commit of its own (or, for a story added after
    the plan, needs review for it): nothing on the branch to find (its tests were judged at
    the head the checkpoint records)."""
    last = story.attempts[-1] if story.attempts else None
    return (
        story.commit is None
        and last is not None
        and last.commit is None
        and last.outcome in (AttemptOutcome.NOTHING_TO_CHANGE, AttemptOutcome.NEEDS_REVIEW)
    )
