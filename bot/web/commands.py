"""Parse a comment body into a reqdrive slash command ("/reqdrive retry US-003")."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.requests import JobKind
from worker.model.prd import STORY_ID_RE  # any id a PRD may hold; ASCII, so "US-٣" is none

# "/reqdrive" must be the whole first word of the comment's first non-blank line, indented by
# at most three spaces: Markdown shows four spaces or a tab as a code block, and a command
# quoted in a code block (or after "> ") is someone showing the command, not giving it.
COMMAND_RE = re.compile(
    r"\A(?:[ \t]*\r?\n)*[ ]{0,3}/reqdrive(?:[ \t]+(?P<args>[^\r\n]*))?[ \t]*(?:\r?\n|\Z)",
    re.IGNORECASE,
)
LEGACY_STORY_ID_RE = re.compile(r"\Aus-(?P<number>[0-9]{1,6})\Z", re.ASCII | re.IGNORECASE)

VERBS = {
    "retry": JobKind.RETRY,
    "cancel": JobKind.CANCEL,
    "status": JobKind.STATUS,
    "plan": JobKind.PLAN,
    "run": JobKind.RUN,
    "help": JobKind.HELP,
    "fix": JobKind.FEEDBACK,  # "/reqdrive fix [what to fix]": any text may follow
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
    if kind is JobKind.FEEDBACK:  # the text is the job's to read, from GitHub
        return Command(kind)
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


def mentions(body: str, app_slug: str | None) -> bool:
    """Does the text mention the App (`@slug`, or `@slug[bot]`) outside a quote or code?

    Without the slug (REQDRIVE_APP_SLUG unset) no mention can be told from another's."""
    if not app_slug:
        return False
    mention = re.compile(rf"(?<![\w@/`])@{re.escape(app_slug)}(?:\[bot\])?(?![\w-])", re.IGNORECASE)
    return any(mention.search(line) for line in _prose_lines(body))


def _prose_lines(body: str) -> list[str]:
    """The lines a person wrote themselves: not quoted ("> "), not in a fenced code block."""
    lines, fenced = [], False
    for line in body.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if not fenced and not stripped.startswith(">"):
            lines.append(line)
    return lines


def normalise_story_id(text: str) -> str | None:
    """The story id as the PRD spells it ("us-3" → "US-3", the seeds' form); None unless the
    text could be a story id at all (user text never reaches a job id)."""
    legacy = LEGACY_STORY_ID_RE.match(text)
    if legacy:
        return f"US-{legacy.group('number')}"
    return text if STORY_ID_RE.match(text) else None
