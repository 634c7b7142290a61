"""What intake leaves in Redis: each delivery's answer (the dedupe) and re-runs waiting."""

from __future__ import annotations

import redis

# GitHub lets a maintainer redeliver for 3 days; keep ids longer so a redelivery is never
# mistaken for a new delivery.
DELIVERY_KEY = "reqdrive:delivery:{delivery_id}"
DELIVERY_TTL_S = 5 * 24 * 3600
# A push editing a requirement whose run is already running leaves the new run's arguments
# here; the running job takes them when it ends and queues the re-run (bot/jobs/drive.py).
RERUN_KEY = "reqdrive:rerun:{job_id}"
RERUN_TTL_S = 7 * 24 * 3600  # as long as a finished run's result is kept


def delivery_key(delivery_id: str) -> str:
    """Where a delivery's answer is kept; written by intake's accept script (bot/web/enqueue.py)."""
    return DELIVERY_KEY.format(delivery_id=delivery_id)


def rerun_key(job_id: str) -> str:
    """Where a newer run of this job's requirement waits; written by the accept script."""
    return RERUN_KEY.format(job_id=job_id)


class Reruns:
    """Newer texts of a requirement that arrived while its run was running, taken when it ends."""

    def __init__(self, conn: redis.Redis) -> None:
        self.conn = conn

    def waiting(self, job_id: str | None) -> bool:
        """Whether a newer text of this job's requirement waits to run after it."""
        return job_id is not None and bool(self.conn.exists(rerun_key(job_id)))

    def take(self, job_id: str) -> str | None:
        """The arguments (JSON) of a run queued behind this job, taken exactly once."""
        raw = self.conn.getdel(rerun_key(job_id))
        return None if raw is None else raw.decode()  # type: ignore[union-attr]

    def drop(self, job_id: str | None) -> None:
        """Nothing runs after this job any more (its pull request was closed)."""
        if job_id is not None:
            self.conn.delete(rerun_key(job_id))
