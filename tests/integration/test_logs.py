"""Logs carry their ids: JSON or text lines, the intake's "job queued", a job's own id."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import redis
from rq import Queue, SimpleWorker
from rq.serializers import JSONSerializer

from bot.ops.logs import configure_from, configure_logging
from bot.ops.settings import load_settings
from bot.web.asgi import create_asgi_app
from tests.support import webhooks
from tests.support.asgi_client import AsgiClient

LOGGER = "tests.integration.test_logs"


def log_inside_a_job(**_: object) -> str:
    """An RQ job that logs the way an engine module does, without naming its job."""
    logging.getLogger(LOGGER).info("working", extra={"run_id": "issue-1-x", "story_id": "US-002"})
    return "done"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The root logger configured by configure_logging into a buffer; restored afterwards."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    stream = io.StringIO()
    yield stream
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_json_lines_carry_time_level_message_and_every_extra_field(captured: io.StringIO) -> None:
    assert configure_logging(None, "INFO", captured) == "json"  # not a terminal: JSON
    logging.getLogger("bot.x").warning("run failed", extra={"run_id": "r1", "step": "gates"})
    [line] = _lines(captured)
    assert line["level"] == "WARNING" and line["logger"] == "bot.x"
    assert line["message"] == "run failed"
    assert (line["run_id"], line["step"]) == ("r1", "gates")
    assert str(line["time"]).endswith("Z") and "T" in str(line["time"])


def test_text_lines_are_readable_with_the_ids_first(captured: io.StringIO) -> None:
    configure_logging("text", "INFO", captured)
    logging.getLogger("bot.x").info(
        "job queued", extra={"kind": "run", "job_id": "run-1", "delivery_id": "d-1"}
    )
    line = captured.getvalue().strip()
    assert line.endswith("INFO bot.x: job queued delivery_id=d-1 job_id=run-1 kind=run")
    assert line[:4].isdigit() and line[10] == "T"


def test_a_field_an_agent_chose_is_shown_escaped_in_text_lines(captured: io.StringIO) -> None:
    configure_logging("text", "INFO", captured)
    target = "a\x1b]52;c;b3duZWQ=\x07\x9b2J:443"  # OSC 52 writes the clipboard; CSI in C1
    logging.getLogger("bot.x").warning("egress refused", extra={"target": target})
    line = captured.getvalue().strip()
    assert not [c for c in line if c in "\x1b\x07\x9b"]
    assert line.endswith('target="a\\u001b]52;c;b3duZWQ=\\u0007\\u009b2J:443"')


def test_configuring_twice_does_not_double_lines(captured: io.StringIO) -> None:
    configure_logging("json", "INFO", captured)
    configure_logging("json", "INFO", captured)
    logging.getLogger("bot.x").info("once")
    assert len(_lines(captured)) == 1


def test_the_level_comes_from_settings_in_any_case(
    captured: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "s")
    monkeypatch.setenv("REQDRIVE_LOG_LEVEL", "warning")
    monkeypatch.setenv("REQDRIVE_LOG_FORMAT", "JSON")
    settings = load_settings()
    configure_logging(settings.reqdrive_log_format, settings.reqdrive_log_level, captured)
    logging.getLogger("bot.x").info("hidden")
    logging.getLogger("bot.x").warning("shown")
    assert [line["message"] for line in _lines(captured)] == ["shown"]


def test_the_intake_logs_one_queued_line_per_job_with_its_delivery(
    captured: io.StringIO, redis_url: str
) -> None:
    configure_logging("json", "INFO", captured)
    settings = load_settings(github_webhook_secret=webhooks.SECRET, redis_url=redis_url)
    client = AsgiClient(create_asgi_app(settings))
    body = webhooks.labeled()
    delivery = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    response = client.post(
        "/webhook", data=body, headers=webhooks.headers("issues", body, delivery_id=delivery)
    )
    assert response.status_code == 202
    queued = [line for line in _lines(captured) if line["message"] == "job queued"]
    assert [line["job_id"] for line in queued] == response.get_json()["job_ids"]
    assert {line["delivery_id"] for line in queued} == {delivery}


def test_a_body_refused_at_the_door_is_logged_with_its_answer(
    captured: io.StringIO, redis_url: str
) -> None:
    configure_logging("json", "INFO", captured)
    settings = load_settings(
        github_webhook_secret=webhooks.SECRET, redis_url=redis_url, reqdrive_body_deadline_s=0.2
    )
    client = AsgiClient(create_asgi_app(settings))
    body = webhooks.labeled()
    response = client.post("/webhook", body, webhooks.headers("issues", body), ending="stall")
    assert response.status_code == 408
    [refused] = [line for line in _lines(captured) if line["message"] == "body refused"]
    assert (refused["logger"], refused["status"], refused["held_bytes"]) == ("bot.web.asgi", 408, 0)


def test_inside_a_job_every_line_names_the_job_and_its_delivery(
    captured: io.StringIO, redis_conn: redis.Redis
) -> None:
    configure_logging("json", "INFO", captured)
    queue = Queue("logs-test", connection=redis_conn, serializer=JSONSerializer)
    job = queue.enqueue(log_inside_a_job, delivery_id="d-42")
    SimpleWorker([queue], connection=redis_conn, serializer=JSONSerializer).work(burst=True)
    [line] = [line for line in _lines(captured) if line["logger"] == LOGGER]
    assert (line["job_id"], line["delivery_id"]) == (job.id, "d-42")
    assert (line["run_id"], line["story_id"]) == ("issue-1-x", "US-002")


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_no_secret_reaches_a_log_line_or_its_traceback(
    captured: io.StringIO, monkeypatch: pytest.MonkeyPatch, log_format: str
) -> None:
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "webhook-secret-value-1234")
    monkeypatch.setenv("REDIS_URL", "redis://:redis-password-5678@127.0.0.1:6379/0")
    monkeypatch.setenv("REQDRIVE_LOG_FORMAT", log_format)
    configure_from(load_settings(), captured)
    token = "ghs_" + "a" * 36
    try:
        raise RuntimeError(f"push failed for https://x-access-token:{token}@github.com/o/r")
    except RuntimeError:
        logging.getLogger("bot.x").exception(
            "run failed", extra={"secret": "webhook-secret-value-1234", "token": token}
        )
    logging.getLogger("bot.x").info("connected to redis-password-5678")
    text = captured.getvalue()
    assert "run failed" in text and "RuntimeError" in text
    for secret in ("webhook-secret-value-1234", "redis-password-5678", token):
        assert secret not in text
    assert text.count("[REDACTED]") >= 4
