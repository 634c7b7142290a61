"""A pull request closed or merged, an installation deleted: their runs stop and what they left
(worktrees, run folders, checkpoints, locks, re-runs waiting) is removed.

A run still going is asked to stop; the worker running it removes its state when it has
stopped (bot/jobs/drive.py), since only that worker holds its lock and its worktree. A run
that is over is removed at once, on the worker that takes the job: its worktree and run folder
live in that worker's work dir (other machines' copies of a run that ended there stay until
their work dir is cleaned). What was pushed stays on GitHub: nothing of the branch is deleted.
"""

from __future__ import annotations

import logging
import shutil

from bot.jobs.runtime import Runtime
from bot.requests import RunRequest
from bot.stores.ci_waiting import CiWaiting
from bot.stores.feedback_waiting import FeedbackWaiting
from bot.stores.run_locks import RedisRunLock, forget_claim, run_lock_key
from bot.stores.runs import RunRecord
from worker.confine.redact import Redactor
from worker.exceptions import PreflightError, ReqdriveError
from worker.git.cache import RepositoryCache
from worker.git.run_branches import release_run
from worker.report.run_folder import RunFolder
from worker.run.context import RunPlaces
from worker.run.resume import stop_leftovers

log = logging.getLogger(__name__)

# The run lock while a run's state is removed, renewed by its thread every third of it: a
# large worktree or a slow disk may take longer to remove, and a lapsed lock would let a new
# run of the requirement start on the worktree being deleted. A worker that dies mid-cleanup
# stops renewing, and the lock lapses this long after.
FORGET_LOCK_S = 60.0


def close_pull(rt: Runtime, request: RunRequest, *, merged: bool) -> dict[str, object]:
    """A reqdrive pull request closed or merged: its run stops, its state goes."""
    record = rt.records.for_branch(request.repo, request.branch or "")
    # The branch name alone is anyone's to choose: a fork's pull request from a branch called
    # reqdrive/<slug>, closed, would stop and wipe that run. Only the run's own pull request
    # ends it.
    if record is None or record.pull_number != request.issue_number:
        return {"status": "no run"}
    return {
        "status": end_run(rt, record, "merged" if merged else "closed"),
        "run_id": record.run_id,
    }


def drop_installation_runs(rt: Runtime, installation_id: int) -> list[str]:
    """The App uninstalled: every run of the installation stops and its state goes."""
    return [
        record.run_id
        for record in rt.records.of_installation(installation_id)
        if end_run(rt, record, "uninstalled") == "stopping"
    ]


def end_run(rt: Runtime, record: RunRecord, why: str) -> str:
    """The run stops ("stopping": its worker removes it once stopped) or is removed."""
    rt.records.mark_gone(record.run_id, why)
    if rt.records.alive(record.run_id):
        rt.records.request_cancel(record.run_id)
        return "stopping"
    forget_run(rt, record)
    return "removed"


def forget_run(rt: Runtime, record: RunRecord) -> bool:
    """Remove a run that is over, under its lock; False when a worker holds it (that worker
    removes it when its run stops)."""
    lock = RedisRunLock(rt.conn, run_lock_key(record.repo, record.source), timeout_s=FORGET_LOCK_S)
    try:
        with lock.held():
            _forget_local(rt, record)
            _forget_shared(rt, record)
    except PreflightError:  # the run lock, or the run folder's lock on this machine
        return False
    log.info("run state removed", extra={"run_id": record.run_id})
    return True


def _forget_local(rt: Runtime, record: RunRecord) -> None:
    """This worker's copies: the run's worktree (and spares), local branch, folders."""
    work_dir = rt.settings.reqdrive_work_dir
    folder = work_dir / "runs" / record.run_id
    cache = RepositoryCache(work_dir / "cache", environment=rt.environment)
    with RunFolder(folder, Redactor()).lock():  # a run of it on this machine holds this
        stop_leftovers(cache.worktrees_dir / record.run_id)
        try:
            release_run(cache, record.clone_url, record.run_id, record.branch, keep=False)
        except ReqdriveError:  # the mirror is broken: its worktree goes with the folder below
            log.warning("run worktree not released", extra={"run_id": record.run_id})
            shutil.rmtree(cache.worktrees_dir / record.run_id, ignore_errors=True)
        RunPlaces.of(work_dir, record.run_id).scratch.remove()
    shutil.rmtree(folder, ignore_errors=True)


def _forget_shared(rt: Runtime, record: RunRecord) -> None:
    """What every worker sees: its checkpoint, the re-run waiting behind it, its liveness and
    cancel flags, a takeover claim; an uninstalled installation's record too."""
    rt.checkpoints.delete(record.run_id)
    rt.reruns.drop(record.job_id)
    FeedbackWaiting(rt.conn).drop(record.run_id)  # a review that waited for it: nothing to run
    CiWaiting(rt.conn).drop(record.run_id)  # nor a CI result
    rt.records.ended(record.run_id)
    rt.records.clear_cancel(record.run_id)
    forget_claim(rt.conn, record.run_id)
    if rt.records.gone(record.run_id) == "uninstalled":
        rt.records.delete(record)
