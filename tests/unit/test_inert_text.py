"""Agent text in PR bodies and commit subjects: closing keywords and mentions made inert."""

from __future__ import annotations

import re

import pytest

from worker.report.inert_text import ZWJ, neutralize

# What GitHub acts on, roughly as it matches: a keyword, then an issue reference; a mention.
GITHUB_CLOSES_RE = re.compile(
    r"\b(close[sd]?|fix(e[sd])?|resolve[sd]?)\s*:?\s+([\w.-]+/[\w.-]+)?(#|gh-)\d", re.IGNORECASE
)
GITHUB_MENTION_RE = re.compile(r"(?<![\w`])@[A-Za-z0-9]")


@pytest.mark.parametrize(
    "text",
    [
        "Closes #2",
        "fixes: #2",
        "Resolved octo/repo#12",
        "FIX GH-4",
        "closed https://github.com/octo/repo/issues/9",
        "Add export (fixes #3, resolves #4)",
    ],
)
def test_closing_keywords_that_name_an_issue_no_longer_read_as_one(text: str) -> None:
    inert = neutralize(text)
    assert not GITHUB_CLOSES_RE.search(inert)
    assert "https://" not in text or not re.search(r"closed\s+https", inert, re.IGNORECASE)
    assert inert.replace(ZWJ, "") == text  # a reader sees the same words


@pytest.mark.parametrize("text", ["ping @octocat", "@org/team please look", "(@a-b)"])
def test_mentions_no_longer_ping_anyone(text: str) -> None:
    inert = neutralize(text)
    assert not GITHUB_MENTION_RE.search(inert)
    assert inert.replace(ZWJ, "") == text


@pytest.mark.parametrize(
    "text", ["This fixes the rounding bug", "mail dev@example.com", "closes the dialog", "#2 only"]
)
def test_text_github_would_not_act_on_is_left_alone(text: str) -> None:
    assert neutralize(text) == text


def test_neutralizing_twice_changes_nothing_more() -> None:
    once = neutralize("Closes #2 @octocat")
    assert neutralize(once) == once
