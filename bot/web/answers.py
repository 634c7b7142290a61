"""Every answer a webhook delivery can get, in one table, and how it is written on the wire.

Both doors (the ASGI front `reqdrive serve` runs and the WSGI middleware in front of Flask)
answer from here, so GitHub's delivery log shows the same words for the same case.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from bot.web.bodies import Refusal


@dataclass(frozen=True)
class Answer:
    """The HTTP status and JSON body a delivery gets."""

    status: int
    body: Mapping[str, object] = field(default_factory=dict)


# Every refusal, in one place: the answer GitHub records for the delivery.
TOO_LARGE = Answer(413, {"error": "body over 25 MiB"})
UNSIGNED = Answer(401, {"error": "X-Hub-Signature-256 missing or wrong"})
MALFORMED = Answer(400, {"error": "event/delivery headers missing or body not a JSON object"})
OVERLONG = Answer(400, {"error": "body longer than its Content-Length"})
GONE = Answer(400, {"error": "the client closed the connection before the body arrived"})
POST_ONLY = Answer(405, {"error": "deliveries are POSTed"})  # someone opened the URL
# Bodies not yet verified are read with a deadline and within a byte budget (bot/web/bodies.py).
TOO_SLOW = Answer(408, {"error": "body not received before the deadline; send it at once"})
BUSY = Answer(503, {"error": "too many deliveries arriving at once; redeliver later"})
QUEUE_DOWN = Answer(503, {"error": "queue unavailable; redeliver later"})
# A repository or organization webhook pointed at reqdrive sends no installation, and a job
# can get no token without one: refused here, with what to do, rather than failing in a worker.
NO_INSTALLATION = Answer(
    422,
    {
        "error": "this delivery names no installation: reqdrive acts only on deliveries GitHub "
        "sends to the App; install the App on the repository instead of adding a webhook"
    },
)
REFUSED_BODIES = {Refusal.TOO_LARGE: TOO_LARGE, Refusal.BUSY: BUSY, Refusal.TOO_SLOW: TOO_SLOW}
# The answers that are not refusals.
PONG = Answer(200, {"ping": "ok"})
IGNORED = Answer(204)
# /healthz and /metrics without Redis: the web process cannot queue anything.
REDIS_UNREACHABLE = Answer(503, {"redis": "unreachable"})
RETRY_AFTER_S = 30  # on every 503: the case is passing (a busy process, Redis restarting)


def encode(answer: Answer) -> bytes:
    """The JSON body of an answer (empty for 204)."""
    return json.dumps(answer.body).encode() if answer.status != 204 else b""


def response_headers(answer: Answer, body: bytes) -> list[tuple[str, str]]:
    """The headers that go with `answer` and its encoded `body`, at either door."""
    headers = [] if answer.status == 204 else [("Content-Type", "application/json")]
    if answer.status == 405:
        headers.append(("Allow", "POST"))
    if answer.status == 503:
        headers.append(("Retry-After", str(RETRY_AFTER_S)))
    if answer.status != 204:
        headers.append(("Content-Length", str(len(body))))
    return headers
