"""The workspace step: the run's worktree, and its checkpoint started or taken up again."""

from __future__ import annotations

import logging
from collections.abc import Callable

from worker.git.cache import RepositoryCache
from worker.git.changes import RunWorktree
from worker.git.runner import GitCredentials
from worker.model.state import Checkpoint, RunStatus
from worker.run.journal import RunJournal
from worker.run.resume import check_requirement, reconcile, stop_leftovers, unproven_stories
from worker.run.spec import RunSpec

log = logging.getLogger(__name__)


def prepare_workspace(
    spec: RunSpec,
    cache: RepositoryCache,
    journal: RunJournal,
    credentials: Callable[[], GitCredentials | None],
) -> RunWorktree:
    """The run's worktree on its branch; a first checkpoint, or the one it resumes checked
    against the branch (pushed if the remote lacks its head) and its retries applied."""
    cp = journal.checkpoint
    if cp is not None:
        _before_resume(spec, cache, cp)
    worktree = cache.prepare(
        spec.remote_url,
        branch=cp.branch if cp else f"reqdrive/{spec.requirement.slug}",
        base_ref=cp.base_ref if cp else spec.base_ref,
        run_id=spec.run_id,
        credentials=credentials(),
    )
    git = RunWorktree(cache, worktree, credentials)
    if cp is None:
        journal.checkpoint = _first_checkpoint(spec, git)
        journal.save()
    else:
        cp.status, cp.error = RunStatus.RUNNING, None
        if spec.new_budget:
            cp.budget_from_usd = cp.cost_usd
        if reconcile(git, cp):
            journal.pushed(git.push())
        _reverify(journal, git)
        _retry(spec, journal)
    return git


def _before_resume(spec: RunSpec, cache: RepositoryCache, cp: Checkpoint) -> None:
    check_requirement(cp, spec.requirement.sha256)
    stopped = stop_leftovers(cache.worktrees_dir / spec.run_id)
    if stopped:
        log.warning(
            "stopped processes of an interrupted run",
            extra={"run_id": spec.run_id, "pids": stopped},
        )


def _first_checkpoint(spec: RunSpec, git: RunWorktree) -> Checkpoint:
    start, worktree = git.head(), git.worktree
    return Checkpoint(
        run_id=spec.run_id,
        requirement_source=spec.requirement.source,
        requirement_sha256=spec.requirement.sha256,
        branch=worktree.branch,
        base_ref=worktree.base_ref,
        base_sha=worktree.base_sha,
        head_sha=start,
        pushed_sha=start if worktree.resumed else None,
        start_sha=start if worktree.resumed else None,
    )


def _reverify(journal: RunJournal, git: RunWorktree) -> None:
    """Stories the checkpoint calls done without their commit on the branch are done again."""
    cp = journal.cp
    unproven = unproven_stories(git, cp)
    if not unproven:
        return
    log.warning("checkpoint claims unproven", extra={"run_id": cp.run_id, "stories": unproven})
    cp.stop_reason = None
    journal.folder.append_progress(
        "resume: the checkpoint calls " + ", ".join(unproven) + " done, but the branch "
        "holds no commit for them; they are pending again"
    )
    journal.save()


def _retry(spec: RunSpec, journal: RunJournal) -> None:
    cp = journal.cp
    reset = cp.retry(spec.retry, failed=spec.retry_failed)
    if not reset:
        return
    log.info("stories retried", extra={"run_id": cp.run_id, "stories": reset})
    journal.folder.append_progress(
        "retry: " + ", ".join(reset) + " pending again (earlier attempts kept, not counted)"
    )
    journal.save()
