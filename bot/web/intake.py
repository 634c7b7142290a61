"""Answer one webhook delivery: size, signature, headers, JSON, triggers, then enqueue."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import ValidationError

from bot.exceptions import QueueUnavailable
from bot.web.bodies import MAX_BODY_BYTES
from bot.web.enqueue import Accepted, Enqueuer
from bot.web.events import Event, Payload
from bot.web.signature import signed_by_github
from bot.web.triggers import RULES, TriggerContext, triggers_for
from worker.model.validation import problems

# Events with a trigger rule, and ping; app.yml subscribes to the same
# (tests/unit/test_app_manifest.py).
ACTED_EVENTS = frozenset({event for event, _action in RULES} | {"ping"})
# GitHub sends a GUID; anything else is refused before it becomes part of a Redis key.
DELIVERY_ID_RE = re.compile(r"\A[A-Za-z0-9._-]{1,100}\Z")
WEBHOOK_PATH = "/webhook"
# A push may name thousands of requirement files; a delivery queues at most this many runs
# (the first ones, in the order the push touched them) and its answer says how many it left.
MAX_JOBS_PER_DELIVERY = 20

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answer:
    """The HTTP status and JSON body a delivery gets."""

    status: int
    body: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class DeliveryHeaders:
    """The three headers a delivery is judged by; None when absent."""

    event: str | None
    delivery_id: str | None
    signature: str | None  # X-Hub-Signature-256


# Every refusal, in one place: the answer GitHub records for the delivery.
TOO_LARGE = Answer(413, {"error": "body over 25 MiB"})
UNSIGNED = Answer(401, {"error": "X-Hub-Signature-256 missing or wrong"})
MALFORMED = Answer(400, {"error": "event/delivery headers missing or body not a JSON object"})
PONG = Answer(200, {"ping": "ok"})
IGNORED = Answer(204)
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
POST_ONLY = Answer(405, {"error": "deliveries are POSTed"})  # someone opened the URL
# Bodies not yet verified are read with a deadline and within a byte budget (bot/web/asgi.py):
# one over what is left of the budget waits for nothing: it is answered 503 and GitHub shows
# it as failed, to be redelivered.
BUSY = Answer(503, {"error": "too many unverified bodies in flight; redeliver later"})
TOO_SLOW = Answer(408, {"error": "body not received before the deadline; send it at once"})
OVERLONG = Answer(400, {"error": "body longer than its Content-Length"})
GONE = Answer(400, {"error": "the client closed the connection before the body arrived"})


def answer_from_headers(event_name: str | None, content_length: int | None) -> Answer | None:
    """The answer a delivery gets before its body is read, or None if the body decides.

    Events reqdrive never acts on are answered 204 without reading the body, verifying the
    signature or touching Redis. That is safe because nothing at all is done for them: a
    forged one costs us nothing and gains its sender nothing.
    """
    if content_length is not None and content_length > MAX_BODY_BYTES:
        return TOO_LARGE
    if event_name is not None and event_name not in ACTED_EVENTS:
        return IGNORED
    return None


class Intake:
    """Verifies, parses and decides; enqueues through the Enqueuer. No GitHub API, no git."""

    def __init__(self, secret: str, enqueuer: Enqueuer, ctx: TriggerContext) -> None:
        self._secret = secret
        self._enqueuer = enqueuer
        self._ctx = ctx

    def receive(self, headers: DeliveryHeaders, body: bytes) -> Answer:
        """Answer one delivery whose headers passed answer_from_headers."""
        if not self._signed(body, headers.signature):
            log.warning("signature refused", extra={"delivery_id": _loggable(headers.delivery_id)})
            return UNSIGNED
        event = _parse(headers, body)
        if not isinstance(event, Event):
            log.info("malformed delivery", extra={"delivery_id": _loggable(headers.delivery_id)})
            return event
        if event.name == "ping":
            return PONG
        triggers = triggers_for(event, self._ctx)
        if not triggers:
            return IGNORED
        if event.payload.installation is None:
            log.info("delivery without installation", extra={"delivery_id": event.delivery_id})
            return NO_INSTALLATION
        dropped = max(0, len(triggers) - MAX_JOBS_PER_DELIVERY)
        try:
            accepted = self._enqueuer.accept(event.delivery_id, triggers[:MAX_JOBS_PER_DELIVERY])
        except QueueUnavailable as exc:
            log.warning(
                "queue unavailable", extra={"delivery_id": event.delivery_id, "error": str(exc)}
            )
            return QUEUE_DOWN
        answer = _accepted_answer(event, accepted)
        if dropped:
            log.warning("jobs capped", extra={"delivery_id": event.delivery_id, "dropped": dropped})
            capped = {
                "limit": MAX_JOBS_PER_DELIVERY,
                "dropped": dropped,
                "note": "push the remaining requirement files separately",
            }
            note = {"capped": capped}
            answer = Answer(answer.status, {**answer.body, **note})
        return answer

    def _signed(self, body: bytes, signature: str | None) -> bool:
        return signed_by_github(body, signature, self._secret)


def _parse(headers: DeliveryHeaders, body: bytes) -> Event | Answer:
    """The event, or the 400 that says what is wrong with it."""
    # gidgethub's Event.from_http is bypassed for speed: it decodes and json.loads the whole
    # body into dicts; pydantic parses the bytes once, keeping only the fields triggers read.
    name, delivery_id = headers.event, headers.delivery_id
    if not name or not delivery_id or not DELIVERY_ID_RE.match(delivery_id):
        return MALFORMED
    try:
        payload = Payload.model_validate_json(body)
    except ValidationError as exc:
        return invalid_payload(exc)
    return Event(name=name, delivery_id=delivery_id, payload=payload)


def invalid_payload(exc: ValidationError) -> Answer:
    """400 naming the first field that is not what GitHub sends (never echoing its value)."""
    first = problems(exc)[0]
    if first.kind in {"json_invalid", "model_type"}:
        return MALFORMED  # not JSON, or not an object
    return Answer(400, {"error": f"payload field {first.path}: {first.message}"})


def _loggable(delivery_id: str | None) -> str | None:
    # Unverified header text: only a well-formed id goes into the log.
    return delivery_id if delivery_id and DELIVERY_ID_RE.match(delivery_id) else None


def _accepted_answer(event: Event, accepted: Accepted) -> Answer:
    # A push editing a requirement whose run is running: that run queues this one when it ends.
    jobs = [
        {"id": j.id, "kind": j.kind, "coalesced": j.coalesced}
        | ({"rerun": "after the running job ends"} if j.rerun else {})
        for j in accepted.jobs
    ]
    job_ids = [j.id for j in accepted.jobs]
    if accepted.duplicate:
        log.info("duplicate delivery", extra={"delivery_id": event.delivery_id})
        return Answer(200, {"duplicate": True, "job_ids": job_ids, "jobs": jobs})
    for job in accepted.jobs:  # one line per job, so a job id found in the worker's log leads here
        log.info(
            "job queued",
            extra={
                "delivery_id": event.delivery_id,
                "job_id": job.id,
                "event": event.name,
                "kind": job.kind,
                "coalesced": job.coalesced,
            },
        )
    return Answer(202, {"job_ids": job_ids, "jobs": jobs})


def encode(answer: Answer) -> bytes:
    """The JSON body of an answer (empty for 204)."""
    return json.dumps(answer.body).encode() if answer.status != 204 else b""
