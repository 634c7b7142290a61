"""Runs whose worker died: noticed by their missing heartbeat and resumed by another worker."""

from __future__ import annotations

import logging
import threading

from rq.job import JobStatus

from bot.jobs.runtime import Runtime
from bot.stores.run_locks import claim_resume
from worker.model.state import RunStatus

log = logging.getLogger(__name__)

SWEEP_EVERY_S = 30.0  # REQDRIVE_RECOVERY_SWEEP_S's default


def sweep(rt: Runtime) -> list[str]:
    """Queue a resume for every active run whose heartbeat expired while its checkpoint says
    running; forget active entries of runs that ended. Returns the run ids queued."""
    queued = []
    for run_id in rt.records.active():
        if rt.records.alive(run_id):
            continue
        cp = rt.checkpoints.load(run_id)
        if cp is None or cp.status is not RunStatus.RUNNING:
            rt.records.ended(run_id)  # ended, or failed in a way the run itself reported
            continue
        if not claim_resume(rt.conn, run_id):
            continue  # another worker's sweeper took it
        retire_lost_job(rt, run_id)
        rt.queue.enqueue(
            "bot.jobs.resume_run",
            kwargs={"run_id": run_id},
            job_timeout=rt.settings.job_timeout_s,
            at_front=True,  # a run already under way goes before new ones
        )
        log.warning("run lost its worker; resume queued", extra={"run_id": run_id})
        queued.append(run_id)
    return queued


def retire_lost_job(rt: Runtime, run_id: str) -> None:
    """Cancel the job the lost worker was running: rq still counts it started, and its own
    cleanup of abandoned jobs retries it (RUN_RETRY) minutes later, a second run beside the
    resume (an "already running" reply, or the finished run reported over again)."""
    record = rt.records.load(run_id)
    job = rt.queue.fetch_job(record.job_id) if record and record.job_id else None
    if job is not None and job.get_status() == JobStatus.STARTED:
        job.cancel()
        log.info("lost job cancelled", extra={"run_id": run_id, "job_id": job.id})


class Sweeper(threading.Thread):
    """Sweeps every SWEEP_EVERY_S in the background of a `reqdrive worker` process."""

    def __init__(self, rt: Runtime, every_s: float = SWEEP_EVERY_S) -> None:
        super().__init__(name="reqdrive-sweeper", daemon=True)
        self.rt, self.every_s = rt, every_s
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.every_s):
            try:
                sweep(self.rt)
            except Exception:  # Redis away for a moment; the next sweep tries again
                log.warning("sweep failed", exc_info=True)
