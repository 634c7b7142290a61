"""Counting deliveries and runs, and GET /metrics exposing the counts for Prometheus.

The web process runs several server processes and the workers run anywhere, so counts live in
one Redis hash that all of them increment (bot/stores/metrics.py); a scrape of any web process
reads the same totals. Deliveries are counted in memory and added to Redis in the background
(never on a delivery's path); runs, story attempts, agent time and cost are added by the worker
as they happen.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence

import redis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from rq import Queue, Worker
from rq.registry import (
    DeferredJobRegistry,
    FailedJobRegistry,
    ScheduledJobRegistry,
    StartedJobRegistry,
)
from rq.serializers import JSONSerializer

from bot.stores.metrics import (
    AGENT_COST,
    AGENT_SECONDS,
    ATTEMPTS,
    DELIVERIES,
    RUNS,
    add_deliveries,
    read_counts,
    record_attempt,
    record_run,
)
from worker.model.state import AttemptRecord, RunResult, RunStep, StoryRecord
from worker.report.protocol import NullReporter, Reporter

FLUSH_EVERY_S = 2.0
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class DeliveryCounter:
    """Deliveries by answer status, counted in memory and added to Redis every few seconds."""

    def __init__(self, connection: redis.Redis) -> None:
        self._connection = connection
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._flusher_pid: int | None = None

    def add(self, status: str) -> None:
        with self._lock:
            self._counts[status] += 1
            if self._flusher_pid != os.getpid():  # first delivery in this (forked) process
                self._flusher_pid = os.getpid()
                threading.Thread(target=self._flush_forever, daemon=True).start()

    def flush(self) -> None:
        """Add what was counted to Redis; kept for the next try if Redis does not answer."""
        with self._lock:
            counts, self._counts = self._counts, Counter()
        if not counts:
            return
        try:
            add_deliveries(self._connection, counts)
        except redis.RedisError:
            with self._lock:
                self._counts.update(counts)

    def _flush_forever(self) -> None:
        while True:
            time.sleep(FLUSH_EVERY_S)
            self.flush()


class MeteredReporter(NullReporter):  # counts none of the agent-call and gate-run events
    """A Reporter that passes each event on, then counts story attempts, agent time and cost,
    and how runs end.

    The engine retries an event whose reporter raised (worker/report/background.py), so the
    count comes after the inner reporter took the event: a retried event is counted once. A
    Redis failure loses a count, never the run.
    """

    def __init__(self, inner: Reporter, connection: redis.Redis) -> None:
        self._inner = inner
        self._connection = connection

    def run_started(self, run_id: str, source: str, branch: str) -> None:
        self._inner.run_started(run_id, source, branch)

    def step_started(self, step: RunStep) -> None:
        self._inner.step_started(step)

    def plan_ready(self, stories: Sequence[StoryRecord]) -> None:
        self._inner.plan_ready(stories)

    def story_started(self, story: StoryRecord, attempt: int, iteration: int) -> None:
        self._inner.story_started(story, attempt, iteration)

    def story_finished(self, story: StoryRecord, attempt: AttemptRecord) -> None:
        self._inner.story_finished(story, attempt)
        record_attempt(self._connection, attempt)

    def branch_pushed(self, branch: str, sha: str) -> None:
        self._inner.branch_pushed(branch, sha)

    def run_finished(self, result: RunResult) -> None:
        self._inner.run_finished(result)
        record_run(self._connection, "ready" if result.ready else "draft")

    def run_failed(self, step: RunStep, message: str, *, error_type: str = "") -> None:
        self._inner.run_failed(step, message, error_type=error_type)
        record_run(self._connection, "failed")


class RedisCollector(Collector):
    """Reads the counters and the queue's state from Redis at every scrape."""

    def __init__(self, connection: redis.Redis, queue_name: str) -> None:
        self._connection = connection
        self._queue_name = queue_name

    def collect(self) -> Iterator[Metric]:
        fields = read_counts(self._connection)
        yield _labelled(fields, DELIVERIES, "answer", "Webhook deliveries answered, by HTTP status")
        yield _labelled(fields, RUNS, "outcome", "Runs ended: ready, draft or failed")
        yield _labelled(fields, ATTEMPTS, "outcome", "Agent calls on a story, by the verdict")
        yield CounterMetricFamily(
            f"reqdrive_{AGENT_SECONDS}", "Seconds agents ran", value=fields.get(AGENT_SECONDS, 0)
        )
        yield CounterMetricFamily(
            f"reqdrive_{AGENT_COST}", "Agent cost reported, USD", value=fields.get(AGENT_COST, 0)
        )
        yield self._queue()
        workers = GaugeMetricFamily("reqdrive_workers", "RQ workers registered on the queue")
        queue = Queue(self._queue_name, connection=self._connection)
        workers.add_metric([], Worker.count(queue=queue))
        yield workers

    def _queue(self) -> GaugeMetricFamily:
        # JSON, and counts without rq's cleanup: a cleanup fetches abandoned jobs and calls
        # their failure callbacks, naming whatever someone wrote into Redis, in the web process.
        # The workers' own maintenance cleans the registries (bot/jobs/worker_class.py).
        queue = Queue(self._queue_name, connection=self._connection, serializer=JSONSerializer)
        depth = GaugeMetricFamily(
            "reqdrive_queue_jobs", "Jobs on the queue, by state", labels=["state"]
        )
        depth.add_metric(["queued"], queue.count)
        registries = {
            "started": StartedJobRegistry,
            "scheduled": ScheduledJobRegistry,
            "deferred": DeferredJobRegistry,
            "failed": FailedJobRegistry,
        }
        for state, registry in registries.items():
            depth.add_metric([state], registry(queue=queue).get_job_count(cleanup=False))
        return depth


def _labelled(fields: dict[str, float], name: str, label: str, text: str) -> CounterMetricFamily:
    family = CounterMetricFamily(f"reqdrive_{name}", text, labels=[label])
    for key, value in sorted(fields.items()):
        counter, _, label_value = key.partition("|")
        if counter == name and label_value:
            family.add_metric([label_value], value)
    return family


def render(connection: redis.Redis, queue_name: str) -> bytes:
    """The Prometheus text exposition of every reqdrive metric, read from Redis now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RedisCollector(connection, queue_name))
    return generate_latest(registry)
