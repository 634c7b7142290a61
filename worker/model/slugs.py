"""The one slug of user text, for branch names and job ids alike."""

from __future__ import annotations

import hashlib
import re
import unicodedata

SLUG_SEPARATOR_RE = re.compile(r"[^a-z0-9]+")


def slugify(text: str, max_len: int = 60) -> str:
    """A branch name component from user text: [a-z0-9-], never empty, never starting with '-'.

    Text with no ASCII letters or digits (e.g. only CJK) gets a short hash, so two such titles
    do not land on the same branch.
    """
    if max_len < 1:
        raise ValueError("max_len must be at least 1")
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    slug = SLUG_SEPARATOR_RE.sub("-", ascii_text.lower()).strip("-")
    slug = slug[:max_len].rstrip("-")
    if not slug:
        digest = hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()
        slug = f"req-{digest[:8]}"[:max_len].rstrip("-")
    return slug
