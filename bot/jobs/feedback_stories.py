"""What a feedback run takes from a pull request: unanswered threads, reviews, fix comments."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from bot.github.review_threads import ReviewThread, Said, ThreadComment
from bot.web.commands import COMMAND_RE, mentions
from worker.model.feedback import (
    MAX_COMMENTS,
    FeedbackComment,
    SourceKind,
    StorySource,
    cut_comment,
    cut_hunk,
    feedback_id,
)
from worker.model.state import StoryRecord

# One run answers at most this many; the rest wait for the next run, which takes them as new.
MAX_FEEDBACK_STORIES = 10
TITLE_PATH_CHARS = 120
FIX_RE = re.compile(r"\A\s{0,3}/reqdrive[ \t]+fix\b[ \t]*", re.IGNORECASE)
GONE_REVIEW_STATES = frozenset({"DISMISSED", "PENDING"})
CRITERIA = [
    "The change the reviewer asks for is made in the code",
    "Every test that passed before still passes",
]


@dataclass(frozen=True)
class Waiting:
    """What the pull request shows: its threads, its reviews' bodies, its comments."""

    threads: list[ReviewThread] = field(default_factory=list)
    reviews: list[Said] = field(default_factory=list)
    comments: list[Said] = field(default_factory=list)


@dataclass(frozen=True)
class Rules:
    """Whose words count and what was taken before."""

    allowed: Callable[[str], bool]  # has the configured permission (requiredPermission)
    app_slug: str | None = None
    known: Collection[str] = ()  # the source keys the run's stories already answer


def feedback_stories(waiting: Waiting, rules: Rules, first_number: int) -> list[StoryRecord]:
    """New FB- stories, numbered from `first_number`: each unresolved thread a person with the
    permission wrote in since a bot (reqdrive) last spoke in it, each review body that asks
    reqdrive for a change, each `/reqdrive fix <text>`; none whose source a story has. At
    most MAX_FEEDBACK_STORIES: `left_waiting` counts the rest, which the next run takes."""
    fresh = fresh_sources(waiting, rules)[:MAX_FEEDBACK_STORIES]
    return [_story(feedback_id(first_number + n), s) for n, s in enumerate(fresh)]


def left_waiting(waiting: Waiting, rules: Rules) -> int:
    """How many fresh sources one run leaves for the next (beyond MAX_FEEDBACK_STORIES)."""
    return max(len(fresh_sources(waiting, rules)) - MAX_FEEDBACK_STORIES, 0)


def fresh_sources(waiting: Waiting, rules: Rules) -> list[StorySource]:
    """Every source of feedback waiting that no story of the run answers yet, in order."""
    sources = [
        *(s for t in waiting.threads if (s := _thread_source(t, rules))),
        *(s for r in waiting.reviews if (s := _review_source(r, rules))),
        *(s for c in waiting.comments if (s := _comment_source(c, rules))),
    ]
    return [s for s in sources if s.key not in rules.known]


def _thread_source(thread: ReviewThread, rules: Rules) -> StorySource | None:
    if thread.resolved or not thread.comments:
        return None
    if thread.comments[0].is_bot or thread.comments[-1].is_bot:
        return None  # another App's thread, or answered last by reqdrive: nothing new from a person
    people = [c for c in thread.comments if _counts(c, rules)]
    if not people:
        return None
    own = f"{rules.app_slug}[bot]" if rules.app_slug else None
    shown = [c for c in thread.comments if c in people or (own and c.author == own)]
    return StorySource(
        kind=SourceKind.THREAD,
        key=f"thread:{thread.id}:{people[-1].id}",
        thread_id=thread.id,
        reply_to=thread.comments[0].id,
        path=thread.path,
        line=thread.line if thread.line is not None else thread.original_line,
        start_line=thread.start_line if thread.line is not None else thread.original_start_line,
        outdated=thread.outdated or thread.line is None,
        diff_hunk=cut_hunk(thread.comments[0].diff_hunk),
        comments=[_quoted(c.author, c.body) for c in shown[-MAX_COMMENTS:]],
        url=people[-1].url,
    )


def _review_source(review: Said, rules: Rules) -> StorySource | None:
    if review.is_bot or not rules.allowed(review.author):
        return None
    state = review.state.upper()
    if state in GONE_REVIEW_STATES:
        return None  # dismissed by a maintainer, or not submitted: it asks nothing any more
    # An approval that mentions the App still asks it for something ("LGTM, @reqdrive rename
    # x"): the trigger took it as a request, so the job does not drop it silently.
    asks = (
        FIX_RE.match(review.body) is not None
        or state == "CHANGES_REQUESTED"
        or mentions(review.body, rules.app_slug)
    )
    text = FIX_RE.sub("", review.body, count=1).strip()
    if not asks or not text:
        return None
    return StorySource(
        kind=SourceKind.REVIEW,
        key=f"review:{review.id}",
        comments=[_quoted(review.author, text)],
        url=review.url,
    )


def _comment_source(comment: Said, rules: Rules) -> StorySource | None:
    if comment.is_bot or COMMAND_RE.match(comment.body) is None:
        return None
    text = FIX_RE.sub("", comment.body.lstrip("\r\n"), count=1).strip()
    if FIX_RE.match(comment.body.lstrip("\r\n")) is None or not text:
        return None  # `/reqdrive fix` alone asks for the threads only
    if not rules.allowed(comment.author):
        return None
    return StorySource(
        kind=SourceKind.COMMENT,
        key=f"comment:{comment.id}",
        reply_to=comment.id,
        comments=[_quoted(comment.author, text)],
        url=comment.url,
    )


def _counts(comment: ThreadComment, rules: Rules) -> bool:
    return not comment.is_bot and rules.allowed(comment.author)


def _quoted(author: str, body: str) -> FeedbackComment:
    return FeedbackComment(author=author[:100], body=cut_comment(body))


def _story(story_id: str, source: StorySource) -> StoryRecord:
    who = source.comments[-1].author if source.comments else "a reviewer"
    where = {
        SourceKind.THREAD: f"the review thread on {_plain(source.lines)}",
        SourceKind.REVIEW: f"the review by {_plain(who)}",
        SourceKind.COMMENT: f"the fix asked by {_plain(who)}",
    }[source.kind]
    return StoryRecord(
        id=story_id,
        title=f"Answer {where}"[:200],
        description=(
            f"A reviewer of this pull request asked for a change in {where}. Make that "
            "change; keep every test that passes now passing."
        ),
        acceptance_criteria=list(CRITERIA),
        priority=0,  # Checkpoint.add_stories puts it after every story there
        source=source,
    )


def _plain(text: str) -> str:
    """User-given text (a path, a login) as one short line a title may hold."""
    kept = "".join(
        ch for ch in text if (unicodedata.category(ch)[0] != "C" and not ch.isspace()) or ch == " "
    )
    return kept[:TITLE_PATH_CHARS] or "?"


def addressed(threads: list[ReviewThread], comment_id: int, app_slug: str | None) -> bool:
    """Is the line comment `comment_id` asking reqdrive? It mentions the App or says
    `/reqdrive fix`, or it answers in a thread where reqdrive replied before it. A comment
    not found (deleted since) asks nothing."""
    for thread in threads:
        ids = [c.id for c in thread.comments]
        if comment_id not in ids:
            continue
        at = ids.index(comment_id)
        comment = thread.comments[at]
        if mentions(comment.body, app_slug) or FIX_RE.match(comment.body):
            return True
        # Without the slug (REQDRIVE_APP_SLUG unset) reqdrive's replies cannot be told from
        # another App's: any App's reply before it counts.
        own = f"{app_slug}[bot]" if app_slug else None
        return any(c.is_bot and own in (None, c.author) for c in thread.comments[:at])
    return False
