"""A feedback story answered where it was asked: its verdict; its thread resolved if it passed."""

from __future__ import annotations

import logging

from bot.github.client import RepoClient
from bot.github.progress import inline_code, inline_text
from bot.github.review_threads import reply_in_thread, resolve_thread
from worker.model.feedback import SourceKind
from worker.model.state import AttemptOutcome, AttemptRecord, StoryRecord, StoryState

log = logging.getLogger(__name__)

REASON_CHARS = 1500
ANSWER_MARKER = "<!-- reqdrive:answer {story_id} {attempt} -->"


def answer(client: RepoClient, pull_number: int, story: StoryRecord, attempt: AttemptRecord) -> int:
    """Reply to the story's source with its verdict (two writes at most: the reply, and the
    resolution of a thread that passed); the number of writes made. A story still pending
    (attempts left) is not answered yet."""
    source = story.source
    if source is None or story.state is StoryState.PENDING:
        return 0
    text = answer_text(story, attempt)
    if source.kind is SourceKind.THREAD and source.reply_to is not None:
        reply_in_thread(client, pull_number, source.reply_to, text)
        if story.state is StoryState.PASSED and source.thread_id:
            resolve_thread(client, source.thread_id)
            return 2
        return 1
    # A review's body or a `/reqdrive fix` comment has no thread: the answer goes on the PR.
    marker = ANSWER_MARKER.format(story_id=story.id, attempt=len(story.attempts))
    client.reply(pull_number, text, marker=marker)
    return 1


def answer_text(story: StoryRecord, attempt: AttemptRecord) -> str:
    """What a person reads in the thread (or on the PR): the verdict, the commits, why it
    did not pass."""
    sid = f"`{inline_code(story.id)}`"
    in_thread = story.source is not None and story.source.kind is SourceKind.THREAD
    commits = _commits(story)
    if story.state is StoryState.PASSED:
        how = (
            "nothing needed to change: its tests pass on the branch as it is"
            if attempt.outcome is AttemptOutcome.NOTHING_TO_CHANGE
            else _proof(story)
        )
        # Only a thread is resolved: a review's body or a `/reqdrive fix` comment has none.
        done = " Resolving this thread." if in_thread else ""
        return f"✅ **{sid} passed**{commits}: {how}.{done}"
    why = inline_text(attempt.reason or str(attempt.outcome))[:REASON_CHARS]
    if story.state is StoryState.NEEDS_REVIEW:
        return _needs_review(story, sid, commits, why, in_thread=in_thread)
    tries = len(story.attempts)
    again = (
        "This thread stays open. Reply here with more detail and mention the App or comment "
        "`/reqdrive fix`,"
        if in_thread
        else "Comment `/reqdrive fix` with more detail,"
    )
    return (
        f"❌ **{sid} did not pass** ({inline_text(str(story.state))} after {tries} "
        f"attempt{'s' if tries != 1 else ''}){commits}: {why}\n\n"
        f"{again} or comment `/reqdrive retry {story.id}` to try again."
    )


def _needs_review(story: StoryRecord, sid: str, commits: str, why: str, *, in_thread: bool) -> str:
    """A change kept on the branch that the worker will not call done (no test of its own
    showed the comment addressed, a change to what a gate runs, ...): a person checks it.
    Never worded as done, and the thread is left for that person to resolve."""
    check = (
        f"please check the change (commit {story.commit[:12]}) yourself"
        if story.commit
        else "reqdrive changed nothing for it: please check the branch as it is yourself"
    )
    after = (
        "This thread stays open: resolve it if the change does what you asked, or reply here "
        "with more detail and mention the App or comment `/reqdrive fix`,"
        if in_thread
        else "Comment `/reqdrive fix` with more detail if it does not do what you asked,"
    )
    return (
        f"⚠️ **{sid} needs review**{commits}: {why}\n\n"
        f"reqdrive does not call this done: {check}. "
        f"{after} or comment `/reqdrive retry {story.id}` to try again."
    )


def _proof(story: StoryRecord) -> str:
    frozen = story.frozen.tests if story.frozen else []
    if frozen:
        shown = ", ".join(f"`{inline_code(t)}`" for t in frozen[:5])
        more = f" and {len(frozen) - 5} more" if len(frozen) > 5 else ""
        return (
            f"its new tests ({shown}{more}) failed without the change and pass with it, and "
            "every test that passed before still passes"
        )
    return "no behaviour changed, and every test that passed before still passes"


def _commits(story: StoryRecord) -> str:
    parts = []
    if story.frozen and story.frozen.commit and story.state is StoryState.PASSED:
        parts.append(f"tests {story.frozen.commit[:12]}")
    if story.commit:
        parts.append(f"change {story.commit[:12]}")
    return f" ({', '.join(parts)})" if parts else ""
