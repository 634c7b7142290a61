"""CI results that arrived while their pull request's run was running: kept, taken when it ends.

One hash per run, holding the newest head's results only: its failure and its success (a ci_fix
job's request each, the newest of each kind). A result for a newer head replaces those of the
older one, which the run's push superseded (bot/jobs/ci_fix.py checks each against the pull
request's head before it waits). bot/jobs/drive.py queues what it holds when the run ends.
"""

from __future__ import annotations

import redis

WAITING_KEY = "reqdrive:ci-waiting:{run_id}"  # hash: head, failure, success (request JSON)
WAITING_TTL_S = 7 * 24 * 3600
KINDS = ("failure", "success")


def waiting_key(run_id: str) -> str:
    return WAITING_KEY.format(run_id=run_id)


class CiWaiting:
    """The CI results a running run's end hands back to the ci_fix job."""

    def __init__(self, conn: redis.Redis) -> None:
        self.conn = conn

    def put(self, run_id: str, head: str, *, success: bool, request_json: str) -> str | None:
        """Keep a result on `head`; the older head whose results it dropped, if any."""
        key = waiting_key(run_id)
        older = self.conn.hget(key, "head")
        older_head = older.decode() if isinstance(older, bytes) else older
        pipe = self.conn.pipeline()  # MULTI: the old head's results go with the new one's kept
        if older_head is not None and older_head != head:
            pipe.delete(key)
        pipe.hset(key, mapping={"head": head, KINDS[success]: request_json})
        pipe.expire(key, WAITING_TTL_S)
        pipe.execute()
        return older_head if older_head != head else None

    def take(self, run_id: str) -> list[str]:
        """The waiting requests (JSON), a failure before a success, taken exactly once."""
        pipe = self.conn.pipeline()
        pipe.hmget(waiting_key(run_id), list(KINDS))
        pipe.delete(waiting_key(run_id))
        values, _ = pipe.execute()
        return [v.decode() if isinstance(v, bytes) else v for v in values if v is not None]

    def drop(self, run_id: str) -> None:
        self.conn.delete(waiting_key(run_id))
