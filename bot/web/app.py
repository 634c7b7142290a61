"""The web process: create_app(settings) with POST /webhook, GET /healthz and GET /metrics."""

from __future__ import annotations

import math
from collections.abc import Callable

import redis
from flask import Flask, Response
from redis.backoff import NoBackoff
from redis.retry import Retry

from bot.ops.logs import configure_from
from bot.ops.metrics import CONTENT_TYPE, CountingEndpoint, DeliveryCounter, render
from bot.ops.settings import Settings, load_settings
from bot.web.answers import REDIS_UNREACHABLE, Answer, encode
from bot.web.bodies import BodyBudget
from bot.web.enqueue import Enqueuer
from bot.web.intake import Intake, WebhookEndpoint
from bot.web.triggers import TriggerContext

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"  # REDIS_URL unset: the local Redis
# A dead Redis must turn into a 503 in about a second, not hang a worker thread.
REDIS_CONNECT_TIMEOUT_S = 1.0
REDIS_SOCKET_TIMEOUT_S = 2.0


def create_app(settings: Settings | None = None) -> Flask:
    """The Flask app (WSGI); with no settings they are read from the environment."""
    return build_app(settings)[0]


def build_app(
    settings: Settings | None = None,
) -> tuple[Flask, Intake, DeliveryCounter, BodyBudget]:
    """The Flask app with its intake and delivery counter, which the ASGI front (bot/web/asgi.py,
    what `reqdrive serve` runs) serves /webhook with."""
    if settings is None:  # the web server's own process: its logs are ours to configure
        settings = load_settings()
        configure_from(settings)
    connection = redis_connection(settings.redis_url or DEFAULT_REDIS_URL)
    timeout_s = math.ceil(settings.reqdrive_job_timeout_hours * 3600)
    intake = Intake(
        settings.github_webhook_secret.get_secret_value(),
        Enqueuer(connection, settings.reqdrive_queue, timeout_s),
        TriggerContext(settings.reqdrive_trigger_label, settings.reqdrive_app_slug),
    )
    counter = DeliveryCounter(connection)
    app = Flask(__name__)
    app.add_url_rule("/healthz", "healthz", _healthz_view(connection), methods=["GET"])
    metrics = _metrics_view(connection, settings.reqdrive_queue, counter)
    app.add_url_rule("/metrics", "metrics", metrics, methods=["GET"])
    # /webhook is served by the WSGI callable itself, in front of Flask (see WebhookEndpoint);
    # every answer it gives is counted on the way out.
    budget = BodyBudget(settings.reqdrive_body_budget_mib * 1024 * 1024,
                        settings.reqdrive_body_deadline_s)  # fmt: skip
    endpoint = WebhookEndpoint(app.wsgi_app, intake, budget)
    app.wsgi_app = CountingEndpoint(endpoint, counter)  # type: ignore[method-assign]
    return app, intake, counter, budget


def redis_connection(url: str) -> redis.Redis:
    """One client (and pool) per process; redis-py makes a fresh pool after a fork."""
    # One immediate retry covers a pooled connection Redis closed; more would only delay a 503.
    # (The accept script does not go through this client: ScriptCall retries it itself.)
    return redis.Redis.from_url(
        url,
        socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
        socket_timeout=REDIS_SOCKET_TIMEOUT_S,
        retry=Retry(NoBackoff(), 1),
    )


def _healthz_view(connection: redis.Redis) -> Callable[[], Response]:
    def healthz() -> Response:
        try:
            connection.ping()
        except redis.RedisError:
            return _response(REDIS_UNREACHABLE)
        return _response(Answer(200, {"redis": "ok"}))

    return healthz


def _metrics_view(
    connection: redis.Redis, queue_name: str, counter: DeliveryCounter
) -> Callable[[], Response]:
    def metrics() -> Response:
        counter.flush()  # this process's latest deliveries, not two seconds late
        try:
            body = render(connection, queue_name)
        except redis.RedisError:
            return _response(REDIS_UNREACHABLE)
        return Response(body, 200, content_type=CONTENT_TYPE)

    return metrics


def _response(answer: Answer) -> Response:
    return Response(encode(answer), answer.status, mimetype="application/json")
