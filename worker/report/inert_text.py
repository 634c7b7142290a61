"""Agent-written text made inert where GitHub would act on it: closing keywords and @mentions.

A PR body or commit message saying `Closes #2` closes issue 2 when it is merged, and `@someone`
pings them. Only reqdrive's own `Closes #n` (the triggering issue) may do that, so agent text
(titles, criteria, reasons, the project name) gets a zero-width joiner inside the keyword or
after the `@`: it reads the same and GitHub no longer recognises it.
"""

from __future__ import annotations

import re

ZWJ = "\u200d"
# GitHub's keywords, followed by a reference to an issue: #2, GH-2, owner/repo#2, or its URL.
CLOSING_RE = re.compile(r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\b", re.IGNORECASE)
REFERENCE_RE = re.compile(
    r"\s*:?\s*(?:[\w.-]+/[\w.-]+)?(?:#|gh-)\d|\s*:?\s*https?://", re.IGNORECASE
)
# A user or team mention: "@name" or "@org/team" not preceded by a word character (emails).
MENTION_RE = re.compile(r"(?<![\w@`])@(?=[A-Za-z0-9][A-Za-z0-9-]*)")


def neutralize(text: str) -> str:
    """The same text with no closing keyword GitHub would act on and no @mention."""
    text = MENTION_RE.sub("@" + ZWJ, text)
    return CLOSING_RE.sub(lambda m: _keyword(m, text), text)


def _keyword(match: re.Match[str], text: str) -> str:
    if not REFERENCE_RE.match(text, match.end()):
        return match.group(0)  # "fixes the bug": no issue named, nothing to do
    word = match.group(0)
    return word[0] + ZWJ + word[1:]
