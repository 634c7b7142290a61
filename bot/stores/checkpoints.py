"""Checkpoints of the App's runs in Redis, so a run resumed on another machine finds them."""

from __future__ import annotations

import time

import redis

from worker.model.state import Checkpoint

CHECKPOINT_KEY = "reqdrive:checkpoint:{run_id}"
CHECKPOINT_TTL_S = 30 * 24 * 3600  # a paused run can be resumed for a month


def checkpoint_key(run_id: str) -> str:
    return CHECKPOINT_KEY.format(run_id=run_id)


class RedisCheckpointStore:
    """The engine's CheckpointStore in Redis: one JSON value per run, kept for a month."""

    def __init__(self, conn: redis.Redis, *, ttl_s: int = CHECKPOINT_TTL_S) -> None:
        self._conn = conn
        self._ttl_s = ttl_s

    def load(self, run_id: str) -> Checkpoint | None:
        raw = self._conn.get(checkpoint_key(run_id))
        return None if raw is None else Checkpoint.model_validate_json(raw)

    def save(self, checkpoint: Checkpoint) -> None:
        checkpoint.updated_at = time.time()
        self._conn.set(
            checkpoint_key(checkpoint.run_id), checkpoint.model_dump_json(), ex=self._ttl_s
        )

    def delete(self, run_id: str) -> None:
        self._conn.delete(checkpoint_key(run_id))
