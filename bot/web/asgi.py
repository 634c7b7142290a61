"""The web process, the one door: POST /webhook read asynchronously, the rest to Flask.

`reqdrive serve` runs create_asgi_app. A body is read without holding a thread: under WSGI a
blocking read held one of the server's threads for as long as the client took to send it, and
a few hundred clients trickling bodies held every thread, so /healthz and real deliveries
waited behind them (issue 7 measured 560). Here a slow body costs a coroutine; it gets the
body deadline to arrive (GitHub itself gives up on an answer after ten seconds), and the bytes
held by bodies not yet verified are capped per process (bot/web/bodies.py), so unsigned
uploads cannot grow the process without bound.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from a2wsgi import WSGIMiddleware

from bot.ops.logs import configure_from
from bot.ops.metrics import DeliveryCounter
from bot.ops.settings import Settings, load_settings
from bot.web.app import DEFAULT_REDIS_URL, create_app, redis_connection
from bot.web.bodies import MAX_BODY_BYTES, BodyBudget
from bot.web.enqueue import Enqueuer
from bot.web.intake import (
    BUSY,
    GONE,
    OVERLONG,
    POST_ONLY,
    TOO_LARGE,
    TOO_SLOW,
    WEBHOOK_PATH,
    Answer,
    DeliveryHeaders,
    Intake,
    answer_from_headers,
    encode,
)
from bot.web.triggers import TriggerContext

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger(__name__)


class WebhookASGI:
    """ASGI app: /webhook here, every other path to `fallback` (the Flask app)."""

    def __init__(
        self, intake: Intake, counter: DeliveryCounter, fallback: ASGIApp, budget: BodyBudget
    ) -> None:
        self._intake = intake
        self._counter = counter
        self._fallback = fallback
        self._budget = budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != WEBHOOK_PATH:
            await self._fallback(scope, receive, send)
            return
        answer = await self._answer(scope, receive) if scope["method"] == "POST" else POST_ONLY
        self._counter.add(str(answer.status))
        await _respond(send, answer)

    async def _answer(self, scope: Scope, receive: Receive) -> Answer:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        length = _content_length(headers)
        early = answer_from_headers(headers.get("x-github-event"), length)
        if early is not None:
            return early
        body = await self._read(receive, length)
        if isinstance(body, Answer):
            if body is GONE:
                log.info("body read ended early")
            else:
                held = self._budget.held_bytes
                log.warning("body refused", extra={"status": body.status, "held_bytes": held})
            return body
        delivery = DeliveryHeaders(
            headers.get("x-github-event"),
            headers.get("x-github-delivery"),
            headers.get("x-hub-signature-256"),
        )
        # Verifying, parsing and the Redis round trip are blocking: off the event loop.
        return await asyncio.to_thread(self._intake.receive, delivery, body)

    async def _read(self, receive: Receive, length: int | None) -> bytes | Answer:
        """The whole body within the deadline and the budget, or the answer refusing it."""
        reserved = 0
        chunks: list[bytes] = []
        try:
            if length is not None:
                if not self._budget.reserve(length):
                    return BUSY
                reserved = length
            async with asyncio.timeout(self._budget.deadline_s):
                size, more = 0, True
                while more:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return GONE
                    chunk: bytes = message.get("body", b"")
                    more = message.get("more_body", False)
                    size += len(chunk)
                    if size > (length if length is not None else MAX_BODY_BYTES):
                        return TOO_LARGE if length is None else OVERLONG
                    if length is None:  # chunked: reserve as it comes
                        if not self._budget.reserve(len(chunk)):
                            return BUSY
                        reserved += len(chunk)
                    chunks.append(chunk)
            return b"".join(chunks)
        except TimeoutError:
            return TOO_SLOW
        finally:
            chunks.clear()
            self._budget.release(reserved)


async def _respond(send: Send, answer: Answer) -> None:
    body = encode(answer)
    headers = [] if answer.status == 204 else [(b"content-type", b"application/json")]
    if answer is POST_ONLY:
        headers.append((b"allow", b"POST"))
    if answer.status == 503:
        headers.append((b"retry-after", b"30"))
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _content_length(headers: dict[str, str]) -> int | None:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return None
    value = headers.get("content-length")
    if value is None:
        return None
    return int(value) if value.strip().isdigit() else 0


def create_asgi_app(settings: Settings | None = None) -> WebhookASGI:
    """The web process (granian's --factory); with no settings they are read from the
    environment and the process's logs configured from them."""
    if settings is None:  # the web server's own process: its logs are ours to configure
        settings = load_settings()
        configure_from(settings)
    connection = redis_connection(settings.redis_url or DEFAULT_REDIS_URL)
    intake = Intake(
        settings.github_webhook_secret.get_secret_value(),
        Enqueuer(connection, settings.reqdrive_queue, settings.job_timeout_s),
        TriggerContext(
            settings.reqdrive_trigger_label, settings.reqdrive_app_slug, settings.github_app_id
        ),
    )
    counter = DeliveryCounter(connection)
    budget_bytes = settings.reqdrive_body_budget_mib * 1024 * 1024
    budget = BodyBudget(budget_bytes, settings.reqdrive_body_deadline_s)
    routes = create_app(connection, settings.reqdrive_queue, counter)
    fallback: Any = WSGIMiddleware(routes)  # type: ignore[arg-type]  # a2wsgi's own scope types
    return WebhookASGI(intake, counter, fallback, budget)
