"""Is this delivery GitHub's? Its X-Hub-Signature-256 checked against the webhook secret."""

from __future__ import annotations

from gidgethub import ValidationFailure
from gidgethub.sansio import validate_event

SIGNATURE_PREFIX = "sha256="


def signed_by_github(body: bytes, signature: str | None, secret: str) -> bool:
    """True only for a SHA-256 signature of exactly these bytes with this secret."""
    # gidgethub also accepts the SHA-1 "sha1=" form; GitHub's SHA-256 header is required.
    if not signature or not signature.startswith(SIGNATURE_PREFIX):
        return False
    try:
        validate_event(body, signature=signature, secret=secret)  # hmac.compare_digest
    except ValidationFailure:
        return False
    return True
