"""Is the blind reviewer blind? No sentence of the requirement or the plan in what it is shown."""

from __future__ import annotations

import re
from collections.abc import Iterable

# A sentence this short ("add a test") is found in any code base; four words and more are the
# requirement's own wording. The title counts like any sentence.
MIN_WORDS = 4
SENTENCE_END_RE = re.compile(r"[.!?;:\n]+(?:\s+|$)")
NOT_WORD_RE = re.compile(r"[^0-9a-z]+")


def normalized(text: str) -> str:
    """Lower case, every run of non-alphanumerics one space: "Add(a, b)!" → "add a b"."""
    return NOT_WORD_RE.sub(" ", text.lower()).strip()


def sentences(texts: Iterable[str]) -> list[str]:
    """The normalized sentences of these texts that are long enough to be their own."""
    found: dict[str, None] = {}
    for text in texts:
        for part in SENTENCE_END_RE.split(text):
            words = normalized(part)
            if len(words.split()) >= MIN_WORDS:
                found[words] = None
    return list(found)


def first_leak(shown: str, secret_sentences: Iterable[str]) -> str | None:
    """The first of `secret_sentences` (normalized) that `shown` holds, or None."""
    haystack = f" {normalized(shown)} "
    return next((s for s in secret_sentences if f" {s} " in haystack), None)
