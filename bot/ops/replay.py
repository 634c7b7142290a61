"""Sign a stored webhook payload as GitHub does and post it to a running server."""

from __future__ import annotations

import hashlib
import hmac
import re
import sys
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 30.0
# What `reqdrive up` writes into its lock file while it runs (bot/ops/startup.py StackLock).
STACK_URL_RE = re.compile(r"webhook URL (http://\S+)")


@dataclass(frozen=True)
class Answer:
    status: int
    body: str


def signature(secret: str, body: bytes) -> str:
    """The X-Hub-Signature-256 value GitHub sends for `body`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def post_delivery(url: str, event: str, body: bytes, secret: str, delivery_id: str) -> Answer:
    """POST one signed delivery; any HTTP status is an answer, not an error."""
    request = urllib.request.Request(  # noqa: S310 - the URL is the developer's own server
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "reqdrive-replay",
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery_id,
            "X-Hub-Signature-256": signature(secret, body),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310
            return Answer(response.status, response.read().decode(errors="replace"))
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, exc.read().decode(errors="replace"))


def running_stack_url(lock_file: Path) -> str | None:
    """The webhook URL of the `reqdrive up` running over this work dir, from its lock file.

    `up` empties the file when it stops, so a URL found here is one that was live."""
    try:
        match = STACK_URL_RE.search(lock_file.read_text(errors="replace"))
    except OSError:
        return None
    return match[1] if match else None


def replay_file(event: str, payload: str, *, url: str, delivery_id: str | None, secret: str) -> int:
    """The `reqdrive replay` command: print the server's answer; 0 on 2xx, else 1."""
    try:
        body = Path(payload).read_bytes()
    except OSError as exc:
        print(f"reqdrive replay: cannot read {payload}: {exc.strerror}", file=sys.stderr)
        return 1
    try:
        answer = post_delivery(url, event, body, secret, delivery_id or str(uuid.uuid4()))
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        print(
            f"reqdrive replay: cannot reach {url}: {reason}; is `reqdrive up` (or serve) running "
            "there? --url names another server",
            file=sys.stderr,
        )
        return 1
    print(answer.status)
    if answer.body:
        print(answer.body)
    return 0 if 200 <= answer.status < 300 else 1
