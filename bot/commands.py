"""Parse a comment body into a reqdrive slash command ("/reqdrive retry US-003")."""

from __future__ import annotations

import re
from dataclasses import dataclass

from worker.requests import JobKind

# "/reqdrive" must be the whole first word: "/reqdriveX" is someone else's command.
COMMAND_RE = re.compile(r"\A\s*/reqdrive(?:[ \t]+(?P<args>[^\r\n]*))?\s*(?:$|[\r\n])", re.I)
STORY_ID_RE = re.compile(r"\AUS-(?P<number>\d{1,6})\Z", re.I)

VERBS = {
    "retry": JobKind.RETRY,
    "cancel": JobKind.CANCEL,
    "status": JobKind.STATUS,
    "plan": JobKind.PLAN,
    "run": JobKind.RUN,
    "help": JobKind.HELP,
}


@dataclass(frozen=True)
class Command:
    """What a comment asks for; story_id only for "retry US-003"."""

    kind: JobKind
    story_id: str | None = None


def parse_command(body: str) -> Command | None:
    """The command in the comment's first line, None if it is not a reqdrive command.

    Anything that starts with /reqdrive but is not a known command (or has arguments a command
    does not take) asks for help, so the user learns the syntax instead of hearing nothing.
    """
    match = COMMAND_RE.match(body)
    if match is None:
        return None
    words = (match.group("args") or "").split()
    if not words:
        return Command(JobKind.HELP)
    kind = VERBS.get(words[0].lower())
    if kind is JobKind.RETRY and len(words) <= 2:
        return _retry(words[1:])
    if kind is None or len(words) > 1:
        return Command(JobKind.HELP)
    return Command(kind)


def _retry(args: list[str]) -> Command:
    if not args:
        return Command(JobKind.RETRY)
    story_id = normalise_story_id(args[0])
    if story_id is None:
        return Command(JobKind.HELP)
    return Command(JobKind.RETRY, story_id)


def normalise_story_id(text: str) -> str | None:
    """ "us-3" → "US-3"; None unless the text is a story id (user text never reaches a job id)."""
    match = STORY_ID_RE.match(text)
    return f"US-{match.group('number')}" if match else None
