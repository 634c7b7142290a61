"""The sample deliveries the README replays are GitHub's shapes and do what their README says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.requests import JobKind
from bot.web.events import Event, Payload
from bot.web.triggers import TriggerContext, triggers_for
from tests.support import webhooks

DELIVERIES = Path(__file__).resolve().parents[2] / "examples" / "deliveries"


@pytest.mark.parametrize(
    ("event", "name", "kinds"),
    [
        ("ping", "ping.json", []),
        ("issues", "issues-labeled-reqdrive.json", [JobKind.RUN]),
        ("push", "push-req.json", [JobKind.RUN]),
        ("issue_comment", "issue-comment-status.json", [JobKind.STATUS]),
    ],
)
def test_each_sample_is_valid_and_asks_for_its_job(
    event: str, name: str, kinds: list[JobKind]
) -> None:
    body = (DELIVERIES / name).read_bytes()
    webhooks.validate(event, json.loads(body))
    found = triggers_for(
        Event(name=event, delivery_id="d", payload=Payload.model_validate_json(body)),
        TriggerContext("reqdrive", "reqdrive"),
    )
    assert [request.kind for request in found] == kinds
    # An App's deliveries name their installation; a job without one cannot get a token.
    assert all(request.installation_id == 1 for request in found)
