"""Feedback that arrived while its pull request's run was running: kept once, taken when it ends."""

from __future__ import annotations

import redis

# One key per run: any number of reviews and comments arriving while the run runs are one
# waiting feedback run (the newest request's arguments; the job reads what is waiting on the
# pull request itself when it starts, so nothing an earlier request asked for is lost).
WAITING_KEY = "reqdrive:feedback-waiting:{run_id}"
WAITING_TTL_S = 7 * 24 * 3600


def waiting_key(run_id: str) -> str:
    return WAITING_KEY.format(run_id=run_id)


class FeedbackWaiting:
    """A feedback run queued behind a running run of the same pull request."""

    def __init__(self, conn: redis.Redis) -> None:
        self.conn = conn

    def put(self, run_id: str, arguments_json: str) -> None:
        self.conn.set(waiting_key(run_id), arguments_json, ex=WAITING_TTL_S)

    def take(self, run_id: str) -> str | None:
        """The waiting request's arguments (JSON), taken exactly once."""
        raw = self.conn.getdel(waiting_key(run_id))
        return None if raw is None else raw.decode()  # type: ignore[union-attr]

    def drop(self, run_id: str) -> None:
        self.conn.delete(waiting_key(run_id))
