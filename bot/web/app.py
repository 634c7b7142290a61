"""The web process's other routes, as a Flask app behind the webhook door: /healthz, /metrics."""

from __future__ import annotations

from collections.abc import Callable

import redis
from flask import Flask, Response
from redis.backoff import NoBackoff
from redis.retry import Retry

from bot.ops.metrics import CONTENT_TYPE, DeliveryCounter, render
from bot.web.intake import Answer, encode

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"  # REDIS_URL unset: the local Redis
# A dead Redis must turn into a 503 in about a second, not hang a worker thread.
REDIS_CONNECT_TIMEOUT_S = 1.0
REDIS_SOCKET_TIMEOUT_S = 2.0


def create_app(connection: redis.Redis, queue_name: str, counter: DeliveryCounter) -> Flask:
    """GET /healthz and GET /metrics; deliveries never reach Flask (bot/web/asgi.py)."""
    app = Flask(__name__)
    app.add_url_rule("/healthz", "healthz", _healthz_view(connection), methods=["GET"])
    metrics = _metrics_view(connection, queue_name, counter)
    app.add_url_rule("/metrics", "metrics", metrics, methods=["GET"])
    return app


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
            return _response(Answer(503, {"redis": "unreachable"}))
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
            return _response(Answer(503, {"redis": "unreachable"}))
        return Response(body, 200, content_type=CONTENT_TYPE)

    return metrics


def _response(answer: Answer) -> Response:
    return Response(encode(answer), answer.status, mimetype="application/json")
