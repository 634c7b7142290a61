"""app.yml subscribes to exactly the webhook events reqdrive acts on, each with the permission
GitHub delivers it under (the API calls' permissions: tests/unit/test_docs.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

from bot.web.intake import ACTED_EVENTS
from bot.web.triggers import RULES

ROOT = Path(__file__).resolve().parents[2]
# "All GitHub Apps receive this event by default. You cannot manually subscribe to this
# event." (GitHub's webhook events reference, `installation`); `ping` is sent to every hook.
DELIVERED_WITHOUT_SUBSCRIBING = frozenset({"installation", "ping"})
# The repository permission under which GitHub delivers each event to an App (the same
# reference, "Availability" and "Webhook permissions" per event).
EVENT_PERMISSION = {
    "issues": "issues",
    "issue_comment": "issues",
    "push": "contents",
    "pull_request": "pull_requests",
    "check_suite": "checks",
    "workflow_run": "actions",
    "pull_request_review": "pull_requests",
    "pull_request_review_comment": "pull_requests",
}


def manifest() -> dict[str, object]:
    loaded: dict[str, object] = yaml.safe_load((ROOT / "app.yml").read_text())
    return loaded


def test_app_yml_subscribes_to_exactly_the_events_the_triggers_act_on() -> None:
    subscribed = set(manifest()["default_events"])  # type: ignore[call-overload]
    acted_on = {event for event, _action in RULES}
    assert subscribed == acted_on - DELIVERED_WITHOUT_SUBSCRIBING
    assert subscribed.isdisjoint(DELIVERED_WITHOUT_SUBSCRIBING)


def test_intake_reads_exactly_the_events_the_triggers_act_on() -> None:
    assert set(ACTED_EVENTS) - {"ping"} == {event for event, _action in RULES}


def test_each_subscribed_event_has_the_permission_it_is_delivered_under() -> None:
    granted = manifest()["default_permissions"]
    assert isinstance(granted, dict)
    subscribed = manifest()["default_events"]
    assert isinstance(subscribed, list)
    assert sorted(EVENT_PERMISSION) == sorted(subscribed)
    assert {event: EVENT_PERMISSION[event] in granted for event in subscribed} == dict.fromkeys(
        subscribed, True
    )
