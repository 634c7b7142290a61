"""GET /metrics: deliveries by answer, queue depth, runs, story attempts, agent time and cost."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from bot.ops.metrics import DeliveryCounter, MeteredReporter
from bot.ops.settings import load_settings
from bot.stores.metrics import record_run
from bot.web.asgi import create_asgi_app
from tests.support import webhooks
from tests.support.asgi_client import AsgiClient
from tests.support.ports import closed_port
from worker.model.state import AttemptOutcome, AttemptRecord, RunResult, RunStep, StoryRecord
from worker.report.protocol import NullReporter


def _client(redis_url: str) -> AsgiClient:
    settings = load_settings(github_webhook_secret=webhooks.SECRET, redis_url=redis_url)
    return AsgiClient(create_asgi_app(settings))


def _samples(client: AsgiClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.content_type.startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text())
        for sample in family.samples
    }


def _post(client: AsgiClient, event: str, body: bytes, secret: str = webhooks.SECRET) -> int:
    headers = webhooks.headers(event, body, secret=secret)
    return client.post("/webhook", data=body, headers=headers).status_code


def test_deliveries_are_counted_by_answer_and_queued_jobs_by_state(redis_url: str) -> None:
    client = _client(redis_url)
    assert _post(client, "issues", webhooks.labeled()) == 202
    assert _post(client, "issues", webhooks.labeled("bug", number=5)) == 204
    assert _post(client, "issues", webhooks.labeled("bug", number=6)) == 204
    assert _post(client, "issues", webhooks.labeled(number=7), secret="wrong") == 401
    samples = _samples(client)
    deliveries = {
        labels[0][1]: value
        for (name, labels), value in samples.items()
        if name == "reqdrive_deliveries_total"
    }
    assert deliveries == {"202": 1.0, "204": 2.0, "401": 1.0}
    assert samples["reqdrive_queue_jobs", (("state", "queued"),)] == 1.0
    assert samples["reqdrive_queue_jobs", (("state", "failed"),)] == 0.0
    assert samples["reqdrive_workers", ()] == 0.0


def test_two_web_processes_report_the_same_totals(redis_url: str) -> None:
    first, second = _client(redis_url), _client(redis_url)
    assert _post(first, "issues", webhooks.labeled("bug")) == 204
    assert _post(second, "issues", webhooks.labeled("bug", number=9)) == 204
    first.get("/metrics")  # each scrape adds its own process's counts first
    assert _samples(second)["reqdrive_deliveries_total", (("answer", "204"),)] == 2.0


class Recording(NullReporter):
    def __init__(self) -> None:
        self.events: list[str] = []

    def story_finished(self, story: StoryRecord, attempt: AttemptRecord) -> None:
        self.events.append(f"story {story.id} {attempt.outcome}")

    def run_finished(self, result: RunResult) -> None:
        self.events.append(f"run ready={result.ready}")

    def run_failed(self, step: RunStep, message: str, *, error_type: str = "") -> None:
        self.events.append(f"run failed at {step}")


class FailsOnce(NullReporter):
    """A reporter whose first story_finished raises, as GitHub being away would."""

    def __init__(self) -> None:
        self.calls = 0

    def story_finished(self, story: StoryRecord, attempt: AttemptRecord) -> None:
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("GitHub away")


def test_an_event_the_engine_retries_is_counted_once(
    redis_url: str, redis_conn: redis.Redis
) -> None:
    reporter = MeteredReporter(FailsOnce(), redis_conn)
    story = StoryRecord(id="US-001", title="t", priority=1, acceptance_criteria=["a"])
    attempt = AttemptRecord(iteration=1, attempt=1, outcome=AttemptOutcome.PASSED, duration_s=3)
    with pytest.raises(ConnectionError):
        reporter.story_finished(story, attempt)
    reporter.story_finished(story, attempt)  # the background reporter's retry
    samples = _samples(_client(redis_url))
    assert samples["reqdrive_story_attempts_total", (("outcome", "passed"),)] == 1.0
    assert samples["reqdrive_agent_seconds_total", ()] == 3.0


def test_runs_attempts_agent_time_and_cost_come_from_the_worker(
    redis_url: str, redis_conn: redis.Redis
) -> None:
    inner = Recording()
    reporter = MeteredReporter(inner, redis_conn)
    story = StoryRecord(id="US-001", title="t", priority=1, acceptance_criteria=["a"])
    for outcome, seconds, cost in [
        (AttemptOutcome.GATES_FAILED, 30.0, 0.25),
        (AttemptOutcome.PASSED, 12.5, None),  # a runner that reports no cost
    ]:
        attempt = AttemptRecord(
            iteration=1, attempt=1, outcome=outcome, duration_s=seconds, cost_usd=cost
        )
        reporter.story_finished(story, attempt)
    draft = RunResult(
        run_id="run-1", requirement_source="ISSUE-1", project="Demo", branch="reqdrive/issue-1",
        base_ref="main", base_sha="0" * 40, head_sha="1" * 40, stories=[story], final_gates=[],
        baseline_gates=[], ready=False,
    )  # fmt: skip
    reporter.run_finished(draft)
    reporter.run_failed(RunStep.VERIFY, "gates could not start", error_type="OSError")
    record_run(redis_conn, "failed")  # a job that failed before its pipeline existed

    samples = _samples(_client(redis_url))
    assert samples["reqdrive_story_attempts_total", (("outcome", "gates failed"),)] == 1.0
    assert samples["reqdrive_story_attempts_total", (("outcome", "passed"),)] == 1.0
    assert samples["reqdrive_agent_seconds_total", ()] == 42.5
    assert samples["reqdrive_agent_cost_usd_total", ()] == 0.25
    assert samples["reqdrive_runs_total", (("outcome", "draft"),)] == 1.0
    assert samples["reqdrive_runs_total", (("outcome", "failed"),)] == 2.0
    # Every event still reached the reporter it wraps.
    assert inner.events == [
        "story US-001 gates failed",
        "story US-001 passed",
        "run ready=False",
        "run failed at verify",
    ]


def test_without_redis_metrics_is_a_503_and_counts_wait_for_it() -> None:
    with closed_port() as port:
        url = f"redis://127.0.0.1:{port}/0"
        client = _client(url)
        assert _post(client, "issues", webhooks.labeled("bug")) == 204
        response = client.get("/metrics")
        assert response.status_code == 503
        counter = DeliveryCounter(redis.Redis.from_url(url, socket_connect_timeout=0.2))
        counter.add("204")
        counter.flush()  # Redis away: the count is kept for the next flush
        assert counter._counts == {"204": 1}
        reporter = MeteredReporter(NullReporter(), redis.Redis.from_url(url))
        attempt = AttemptRecord(iteration=1, attempt=1, outcome=AttemptOutcome.PASSED)
        reporter.story_finished(StoryRecord(id="US-1", title="t", priority=1,
                                            acceptance_criteria=["a"]), attempt)  # fmt: skip


def test_the_metrics_operations_md_documents_are_the_ones_served(redis_url: str) -> None:
    operations = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    documented = dict(
        re.findall(r"^\| `(reqdrive_\w+?)(?:\{(\w+)\})?` \| \w+ \|", operations, re.M)
    )
    client = _client(redis_url)
    assert _post(client, "issues", webhooks.labeled()) == 202  # one labelled sample
    families = text_string_to_metric_families(client.get("/metrics").text())
    served = {
        family.name + ("_total" if family.type == "counter" else ""): family for family in families
    }
    assert sorted(documented) == sorted(served)
    for name, family in served.items():
        labels = {label for sample in family.samples for label in sample.labels}
        # A labelled counter nothing has added to has no sample yet, so no label to compare.
        assert labels <= {documented[name]} - {""}, name
    assert {"answer"} == {
        label for s in served["reqdrive_deliveries_total"].samples for label in s.labels
    }
