"""GitHub's limits: body size, rate-limit waits, and which failures a call may repeat."""

from __future__ import annotations

import re
import time

import requests
from github import GithubException, GithubRetry

# GitHub refuses issue, comment, PR and check-run text over 65,536 characters.
BODY_LIMIT = 65_536
BODY_MARGIN = 512  # room for the note saying where the rest is, and the hidden marker
MARKER_RE = re.compile(r"\n*(<!-- reqdrive:[^>]*-->)\s*\Z")
# A 403/429 that names no wait: GitHub's advice for secondary limits is at least a minute.
DEFAULT_LIMIT_WAIT_S = 60.0
MAX_LIMIT_WAIT_S = 15 * 60.0
# Idempotent methods PyGithub's GithubRetry may repeat on a 5xx by itself. A POST is never in
# this list: a POST that failed may have created what it asked for, so the client looks for
# it (by marker or head branch) before it asks again.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PATCH", "PUT", "DELETE"})


def fit_body(text: str, where: str) -> str:
    """`text` cut below GitHub's limit, with a note saying where the full text is; the hidden
    marker at its end, if any, is kept so the comment or PR is still found again."""
    if len(text) <= BODY_LIMIT - BODY_MARGIN:
        return text
    marker = MARKER_RE.search(text)
    kept = text[: marker.start()] if marker else text
    note = (
        f"\n\n… (cut: {len(text):,} characters are more than GitHub shows; "
        f"the full text is {where})"
    )
    body = kept[: BODY_LIMIT - BODY_MARGIN - len(note)] + note
    return body + (f"\n\n{marker.group(1)}\n" if marker else "\n")


def github_retry() -> GithubRetry:
    """PyGithub's retry for idempotent calls: 5xx, and the 403s GithubRetry recognises."""
    return GithubRetry(
        total=3,
        backoff_factor=0.5,
        status_forcelist=list(range(500, 600)),
        allowed_methods=IDEMPOTENT_METHODS,
    )


def rate_limit_wait(error: GithubException, now: float | None = None) -> float | None:
    """Seconds to wait before repeating a call GitHub refused for its rate limits; None when
    the refusal was not about limits (a 403 for missing permission must not be repeated)."""
    if error.status not in (403, 429):
        return None
    headers = {k.lower(): v for k, v in (error.headers or {}).items()}
    retry_after = headers.get("retry-after", "")
    if retry_after.strip().isdigit():
        return min(float(retry_after), MAX_LIMIT_WAIT_S)
    if (
        headers.get("x-ratelimit-remaining") == "0"
        and headers.get("x-ratelimit-reset", "").isdigit()
    ):
        reset = float(headers["x-ratelimit-reset"]) - (time.time() if now is None else now)
        return min(max(reset, 0.0) + 1.0, MAX_LIMIT_WAIT_S)
    message = str((error.data or {}).get("message", "")) if isinstance(error.data, dict) else ""
    if error.status == 429 or "rate limit" in message.lower():
        return DEFAULT_LIMIT_WAIT_S
    return None


def transient(error: Exception) -> bool:
    if isinstance(error, requests.Timeout | requests.ConnectionError):
        return True
    return isinstance(error, GithubException) and error.status >= 500
