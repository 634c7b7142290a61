"""Counters every process adds to, in one Redis hash: deliveries, runs, attempts, agent time."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import redis

from worker.model.state import AttemptRecord

log = logging.getLogger(__name__)

METRICS_KEY = "reqdrive:metrics"
# Hash fields: "<counter>|<label value>" or "<counter>" for unlabelled ones.
DELIVERIES, RUNS, ATTEMPTS = "deliveries", "runs", "story_attempts"
AGENT_SECONDS, AGENT_COST = "agent_seconds", "agent_cost_usd"


def add_deliveries(connection: redis.Redis, counts: Mapping[str, int]) -> None:
    """Deliveries answered, by HTTP status; raises when Redis does not take them."""
    with connection.pipeline(transaction=False) as pipe:
        for status, count in counts.items():
            pipe.hincrby(METRICS_KEY, f"{DELIVERIES}|{status}", count)
        pipe.execute()


def record_attempt(connection: redis.Redis, attempt: AttemptRecord) -> None:
    """One agent call on a story: its outcome, how long the agent took and what it cost."""
    try:
        with connection.pipeline(transaction=False) as pipe:
            pipe.hincrby(METRICS_KEY, f"{ATTEMPTS}|{attempt.outcome.value}", 1)
            pipe.hincrbyfloat(METRICS_KEY, AGENT_SECONDS, attempt.duration_s)
            pipe.hincrbyfloat(METRICS_KEY, AGENT_COST, attempt.cost_usd or 0.0)
            pipe.execute()
    except redis.RedisError:
        log.warning("metrics not recorded", extra={"metric": ATTEMPTS})


def record_run(connection: redis.Redis, outcome: str) -> None:
    """A run that ended: "ready", "draft" or "failed"."""
    try:
        connection.hincrby(METRICS_KEY, f"{RUNS}|{outcome}", 1)
    except redis.RedisError:
        log.warning("metrics not recorded", extra={"metric": RUNS})


def read_counts(connection: redis.Redis) -> dict[str, float]:
    """Every counter, by hash field."""
    stored: dict[bytes, bytes] = connection.hgetall(METRICS_KEY)  # type: ignore[assignment]
    return {key.decode(): float(value) for key, value in stored.items()}
