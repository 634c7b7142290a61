"""The web process as served: POST /webhook read asynchronously with a deadline and a memory
budget, everything else (healthz, metrics) through the Flask app.

Under WSGI a request's body is read by a blocking call that holds one of the server's threads
for as long as the client takes to send it: a few hundred clients trickling bodies held every
thread, and /healthz and real deliveries waited behind them (issue 7 measured 560). Here a
slow body costs a coroutine, never a thread; it gets BODY_DEADLINE_S to arrive (GitHub itself
gives up on an answer after ten seconds), and the bytes held by bodies not yet verified are
capped per process (the same BodyBudget as the WSGI path), so unsigned uploads cannot grow the
process without bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from a2wsgi import WSGIMiddleware

from bot.ops.metrics import DeliveryCounter
from bot.web.answers import (
    BUSY,
    GONE,
    OVERLONG,
    POST_ONLY,
    TOO_LARGE,
    TOO_SLOW,
    Answer,
    encode,
    response_headers,
)
from bot.web.app import build_app
from bot.web.bodies import MAX_BODY_BYTES, BodyBudget
from bot.web.intake import WEBHOOK_PATH, DeliveryHeaders, Intake, answer_from_headers

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# The deadline and the byte budget are the WSGI path's (bot/web/bodies.py, REQDRIVE_BODY_*): a
# delivery over what is left of the budget waits for nothing: it is answered 503 and GitHub
# shows it as failed, to be redelivered.


class WebhookASGI:
    """ASGI app: /webhook here, every other path to `fallback` (the Flask app)."""

    def __init__(
        self,
        intake: Intake,
        counter: DeliveryCounter,
        fallback: Callable[[Scope, Receive, Send], Awaitable[None]],
        budget: BodyBudget,
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
    headers = [(k.lower().encode(), v.encode()) for k, v in response_headers(answer, body)]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _content_length(headers: dict[str, str]) -> int | None:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return None
    value = headers.get("content-length")
    if value is None:
        return None
    return int(value) if value.strip().isdigit() else 0


def create_asgi_app() -> WebhookASGI:
    """The web server's factory (granian --interface asgi): settings from the environment."""
    flask_app, intake, counter, budget = build_app()
    fallback: Any = WSGIMiddleware(flask_app)  # type: ignore[arg-type]  # a2wsgi's own scope types
    return WebhookASGI(intake, counter, fallback, budget)
