"""A feedback run: a pull request's unanswered review threads and fix requests as FB- stories."""

from __future__ import annotations

import logging
from collections.abc import Callable

from bot.github.client import RepoClient
from bot.github.review_threads import issue_comments, review_threads, reviews
from bot.jobs.feedback_stories import (
    MAX_FEEDBACK_STORIES,
    Rules,
    Waiting,
    addressed,
    feedback_stories,
    left_waiting,
)
from bot.jobs.job_frame import Answer, reply
from bot.jobs.pr_stories import run_added_stories
from bot.jobs.preflight import ROLES, Refusal, check_permission, find_run, repo_context
from bot.jobs.runtime import Runtime
from bot.requests import RunRequest
from bot.stores.ci_fixes import CiFixes
from bot.stores.feedback_waiting import FeedbackWaiting
from worker.model.feedback import next_feedback_number

log = logging.getLogger(__name__)

NOT_A_PULL = "`/reqdrive fix` works on a reqdrive pull request, not on an issue."
NOTHING_TO_FIX = (
    "Nothing to fix: no open review thread, review or `/reqdrive fix` request waits for "
    "reqdrive on this pull request (resolved threads, and threads reqdrive answered last, are "
    "left alone). To ask for a change, comment on a line of the diff mentioning the App, reply "
    "in a thread reqdrive answered, or comment `/reqdrive fix <what to change>`."
)
LEFT_FOR_NEXT = (
    "This feedback run takes {taken} of the review's requests; {left} more wait and the "
    "feedback run after this one takes them (at most {cap} a run)."
)
LEFT_MARKER = "<!-- reqdrive:feedback-left {run_id} {first} -->"


def handle_feedback(rt: Runtime, client: RepoClient, request: RunRequest) -> Answer:
    """Who asked may; the run is idle (else the request waits for it); what waits on the
    pull request becomes FB- stories, run on its branch and answered where they were asked."""
    if request.requirement is not None or request.issue_number is None:
        raise Refusal(NOT_A_PULL)
    threads = review_threads(client, request.issue_number)
    slug = rt.settings.reqdrive_app_slug
    if request.review_comment_id is not None and not addressed(
        threads, request.review_comment_id, slug
    ):
        return {"status": "not addressed to reqdrive"}  # people talking in their own thread
    ctx = repo_context(client)
    check_permission(client, request.sender, ctx.config.required_permission)
    record = find_run(client, rt.records, request)
    if rt.records.alive(record.run_id):
        # Coalesced: every request arriving while the run runs is one feedback run after it
        # (bot/jobs/drive.py queues it), which reads everything then waiting.
        FeedbackWaiting(rt.conn).put(record.run_id, request.model_dump_json())
        return {"status": "queued after the running run", "run_id": record.run_id}
    # A person asking again takes the pull request back from a hand-off (their push): red
    # CI is reqdrive's to fix again, its attempts counted anew (bot/jobs/ci_fix.py), and the
    # stories build on the head they pushed. Without a hand-off the run's own head stands
    # (the API's head of a pull request can lag a push behind).
    fixes = CiFixes(rt.conn)
    handed_off = fixes.handed_off(request.repo, request.issue_number) is not None
    fixes.clear(request.repo, request.issue_number)
    cp = rt.checkpoints.load(record.run_id)
    known = [s.source.key for s in cp.stories if s.source is not None] if cp else []
    number = request.issue_number
    waiting = Waiting(
        threads=threads,
        reviews=reviews(client, number),
        comments=issue_comments(client, number),
    )
    rules = Rules(
        allowed=_allowed(client, ctx.config.required_permission),
        app_slug=rt.settings.reqdrive_app_slug,
        known=known,
    )
    first = next_feedback_number([s.id for s in cp.stories] if cp else [])
    stories = feedback_stories(waiting, rules, first)
    if not stories:
        # Taken by an earlier feedback run, or nothing a person with the permission asked.
        # Only a `/reqdrive fix` comment is told so: a review's line comments arrive as
        # deliveries of their own, and the first run takes them all.
        if request.comment_id is not None:
            reply(client, request, NOTHING_TO_FIX)
        return {"status": "no feedback waiting", "run_id": record.run_id}
    note = _more_waiting(rt, client, request, record.run_id, first, left_waiting(waiting, rules))
    head = client.read(lambda: client.repo.get_pull(number)).head.sha if handed_off else None
    added = run_added_stories(
        rt, client, record, stories, labels=ctx.config.pr_labels, head=head, note=note
    )
    result = added.result
    status = "finished" if result is not None else "failed"
    if not added.story_ids:
        status = "no feedback waiting"
    return {"status": status, "run_id": record.run_id, "stories": added.story_ids}


def _more_waiting(
    rt: Runtime, client: RepoClient, request: RunRequest, run_id: str, first: int, left: int
) -> str | None:
    """More waits than one run takes: the pull request says so, and the next feedback run is
    queued behind this one (bot/jobs/drive.py takes it when the run ends)."""
    if not left:
        return None
    text = LEFT_FOR_NEXT.format(taken=MAX_FEEDBACK_STORIES, left=left, cap=MAX_FEEDBACK_STORIES)
    FeedbackWaiting(rt.conn).put(run_id, request.model_dump_json())
    marker = LEFT_MARKER.format(run_id=run_id, first=first)
    client.reply(request.issue_number or 0, text, marker=marker)
    return text


def _allowed(client: RepoClient, required: str) -> Callable[[str], bool]:
    """Has this login the configured permission? Asked once per login (a read each)."""
    roles: dict[str, bool] = {}

    def allowed(login: str) -> bool:
        if login not in roles:
            role = client.role_of(login)
            rank = ROLES.index(role) if role in ROLES else ROLES.index("read")
            roles[login] = rank >= ROLES.index(required)
        return roles[login]

    return allowed
