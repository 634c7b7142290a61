"""Webhook deliveries for tests: GitHub's example payloads, its signature, schema checks."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from bot.ops.replay import signature

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "github"
EXAMPLES = FIXTURES / "webhooks"  # octokit/webhooks' examples, <event>/<name>, byte for byte
SCHEMAS = FIXTURES / "webhook-schemas"  # and the JSON Schemas they validate against
SECRET = "test-webhook-secret"


def example_bytes(event: str, name: str) -> bytes:
    """The exact bytes of an example, e.g. ("issues", "labeled.payload.json")."""
    return (EXAMPLES / event / name).read_bytes()


def example(event: str, name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(example_bytes(event, name))
    return payload


def variant(event: str, name: str, change: Callable[[dict[str, Any]], None]) -> bytes:
    """An example changed in place by `change`, checked against GitHub's schema, as bytes."""
    payload = copy.deepcopy(example(event, name))
    change(payload)
    validate(event, payload)
    return json.dumps(payload).encode()


# octokit's schemas (at the commit the fixtures come from) stop before these events: their
# payloads are held to GitHub's own example of the event instead (`same_shape`).
SHAPE_EXAMPLES = {"workflow_run": "completed.3.payload.json"}


def validate(event: str, payload: dict[str, Any]) -> str:
    """Raise unless the payload matches octokit's schema for its event and action; return
    the schema's id ("issues$labeled")."""
    if event in SHAPE_EXAMPLES:
        same_shape(example(event, SHAPE_EXAMPLES[event]), payload, event)
        return f"{event}$example"
    action = payload.get("action", "event") if event not in {"push", "ping"} else "event"
    schema_id = f"{event}${action}"
    jsonschema.Draft7Validator({"$ref": schema_id}, registry=_registry()).validate(payload)
    return schema_id


def same_shape(example: Any, payload: Any, where: str = "") -> None:
    """Raise unless `payload` has every key `example` has, each of the same JSON type (null
    allowed either way): for events octokit gives no schema of (workflow_run)."""
    if isinstance(example, dict):
        assert isinstance(payload, dict), f"{where}: not an object"
        for key, value in example.items():
            assert key in payload, f"{where}.{key}: missing"
            same_shape(value, payload[key], f"{where}.{key}")
    elif isinstance(example, list) and example and isinstance(payload, list):
        for item in payload:
            same_shape(example[0], item, f"{where}[]")
    elif example is not None and payload is not None:
        assert type(example) is type(payload), f"{where}: {type(payload).__name__}"


@cache
def _registry() -> Registry:
    resources = []
    for path in sorted(SCHEMAS.rglob("*.schema.json")):
        schema = json.loads(path.read_text())
        resources.append((schema["$id"], Resource.from_contents(schema, DRAFT7)))
    return Registry().with_resources(resources)


def sign(body: bytes, secret: str = SECRET) -> str:
    """The X-Hub-Signature-256 GitHub sends for these exact bytes."""
    return signature(secret, body)  # checked against GitHub's own test vector in test_cli


def headers(
    event: str, body: bytes, *, delivery_id: str | None = None, secret: str = SECRET
) -> dict[str, str]:
    """The headers of a signed delivery, as GitHub sends them."""
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(body, secret),
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/tests",
    }


# Common variants, built from real examples.

# What GitHub adds to every delivery it sends to an App (octokit's example of it); reqdrive
# refuses triggers without it (bot/web/intake.py NO_INSTALLATION).
INSTALLATION = {"id": 1, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMQ=="}


def labeled(label: str = "reqdrive", number: int | None = None) -> bytes:
    def change(p: dict[str, Any]) -> None:
        p["label"]["name"] = label
        p.setdefault("installation", dict(INSTALLATION))
        if number is not None:
            p["issue"]["number"] = number

    return variant("issues", "labeled.payload.json", change)


def push_of(
    commits: list[tuple[list[str], list[str], list[str]]],
    *,
    ref: str = "refs/heads/master",
    deleted: bool = False,
    sender: tuple[str, str] = ("Codertocat", "User"),
) -> bytes:
    """A branch push (from the with-installation example) with these (added, modified,
    removed) commits."""

    def change(p: dict[str, Any]) -> None:
        template = p["commits"][0]
        p["commits"] = [
            {**template, "added": a, "modified": m, "removed": r} for a, m, r in commits
        ]
        p["ref"], p["deleted"] = ref, deleted
        p["sender"]["login"], p["sender"]["type"] = sender

    return variant("push", "with-new-branch.payload.json", change)


def comment(
    body: str,
    *,
    on_pull_request: bool = False,
    action: str = "created",
    user: tuple[str, str] = ("Codertocat", "User"),
) -> bytes:
    """An issue_comment delivery with this body; optionally on a pull request."""
    name = (
        "created.with-installation.payload.json" if action == "created" else "edited.payload.json"
    )

    def change(p: dict[str, Any]) -> None:
        p["comment"]["body"] = body
        p.setdefault("installation", dict(INSTALLATION))
        p["comment"]["user"]["login"], p["comment"]["user"]["type"] = user
        if on_pull_request:
            # No example of octokit's comments on a PR; GitHub marks such an "issue" like this.
            url = p["repository"]["url"] + f"/pulls/{p['issue']['number']}"
            p["issue"]["pull_request"] = {
                "url": url,
                "html_url": p["repository"]["html_url"] + f"/pull/{p['issue']['number']}",
                "diff_url": p["repository"]["html_url"] + f"/pull/{p['issue']['number']}.diff",
                "patch_url": p["repository"]["html_url"] + f"/pull/{p['issue']['number']}.patch",
                "merged_at": None,
            }

    return variant("issue_comment", name, change)


def example_path(event: str, name: str) -> Path:
    return EXAMPLES / event / name


def review(
    state: str = "changes_requested",
    body: str | None = None,
    *,
    branch: str = "reqdrive/issue-1-feature",
    user: tuple[str, str] = ("Codertocat", "User"),
    sender: tuple[str, str] | None = None,
) -> bytes:
    """A pull_request_review.submitted delivery (octokit's example) on `branch`."""

    def change(p: dict[str, Any]) -> None:
        p["review"]["state"], p["review"]["body"] = state, body
        p["review"]["user"]["login"], p["review"]["user"]["type"] = user
        p["sender"]["login"], p["sender"]["type"] = sender or user
        p["pull_request"]["head"]["ref"] = branch
        p.setdefault("installation", dict(INSTALLATION))

    return variant("pull_request_review", "submitted.payload.json", change)


def review_comment(
    body: str,
    *,
    branch: str = "reqdrive/issue-1-feature",
    user: tuple[str, str] = ("Codertocat", "User"),
) -> bytes:
    """A pull_request_review_comment.created delivery (a line comment on the diff)."""

    def change(p: dict[str, Any]) -> None:
        p["comment"]["body"] = body
        p["comment"]["user"]["login"], p["comment"]["user"]["type"] = user
        p["sender"]["login"], p["sender"]["type"] = user
        p["pull_request"]["head"]["ref"] = branch
        p.setdefault("installation", dict(INSTALLATION))

    return variant("pull_request_review_comment", "created.payload.json", change)
