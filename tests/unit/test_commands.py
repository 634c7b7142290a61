"""Slash commands: what each comment body asks reqdrive to do."""

from __future__ import annotations

import pytest

from bot.requests import JobKind
from bot.web.commands import Command, normalise_story_id, parse_command


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("/reqdrive retry US-003", Command(JobKind.RETRY, "US-003")),
        ("/reqdrive retry us-7", Command(JobKind.RETRY, "US-7")),
        ("/reqdrive retry", Command(JobKind.RETRY)),
        ("/reqdrive cancel", Command(JobKind.CANCEL)),
        ("/reqdrive status", Command(JobKind.STATUS)),
        ("/reqdrive plan", Command(JobKind.PLAN)),
        ("/reqdrive run", Command(JobKind.RUN)),
        ("/reqdrive help", Command(JobKind.HELP)),
        ("/reqdrive RUN", Command(JobKind.RUN)),
        ("  /reqdrive\tstatus  ", Command(JobKind.STATUS)),
        ("/reqdrive status\nthanks, and what about the tests?", Command(JobKind.STATUS)),
        ("/reqdrive status\r\nmore", Command(JobKind.STATUS)),
    ],
)
def test_a_known_command_is_recognised(body: str, expected: Command) -> None:
    assert parse_command(body) == expected


@pytest.mark.parametrize(
    "body",
    [
        "/reqdrive",
        "/reqdrive deploy",
        "/reqdrive retry US-3/../x",
        "/reqdrive retry US-003; rm -rf /",
        "/reqdrive retry US-003 US-004",
        "/reqdrive cancel now",
        "/reqdrive retry US-",
    ],
)
def test_anything_else_after_the_prefix_asks_for_help(body: str) -> None:
    assert parse_command(body) == Command(JobKind.HELP)


@pytest.mark.parametrize(
    "body",
    [
        "You are totally right! I'll get this fixed right away.",
        "/reqdriver run",
        "/reqdrive-run",
        "please /reqdrive run",
        "> /reqdrive run",
        "",
    ],
)
def test_a_comment_that_does_not_start_with_the_command_is_not_one(body: str) -> None:
    assert parse_command(body) is None


def test_story_ids_are_normalised_and_nothing_else_passes() -> None:
    assert normalise_story_id("us-012") == "US-012"
    assert normalise_story_id("US-1") == "US-1"
    assert normalise_story_id("US-1\n") is None
    assert normalise_story_id("../US-1") is None
    assert normalise_story_id("US-") is None


@pytest.mark.parametrize("story_id", ["US-1x", "STORY-2", "auth.login", "s_3", "A"])
def test_any_id_a_plan_may_hold_can_be_retried(story_id: str) -> None:
    assert parse_command(f"/reqdrive retry {story_id}") == Command(JobKind.RETRY, story_id)


@pytest.mark.parametrize(
    "story_id",
    ["US-\u0663", "US-\uff11", "\u0423S-1", "US\u200b-1", "x" * 41],  # Arabic-Indic and
    # full-width digits, a Cyrillic U, a zero-width space, too long
)
def test_non_ascii_or_overlong_story_ids_ask_for_help(story_id: str) -> None:
    expected = JobKind.RETRY if story_id == "US-1" else JobKind.HELP
    command = parse_command(f"/reqdrive retry {story_id}")
    assert command is not None and command.kind is expected


@pytest.mark.parametrize(
    "body",
    [
        "    /reqdrive run",  # an indented code block
        "\t/reqdrive run",
        "```\n/reqdrive run\n```",  # a fenced code block
        "~~~\n/reqdrive cancel\n~~~",
        "> /reqdrive run",  # a quote
        "Try this:\n/reqdrive run",  # not the first line
    ],
)
def test_a_command_shown_in_markdown_is_not_given(body: str) -> None:
    assert parse_command(body) is None


def test_blank_lines_before_the_command_are_allowed() -> None:
    assert parse_command("\n  \n/reqdrive status") == Command(JobKind.STATUS)
