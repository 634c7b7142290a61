"""A feedback run: a pull request's unanswered review threads and fix requests as FB- stories."""

from __future__ import annotations

import logging
from collections.abc import Callable

from bot.github.client import RepoClient
from bot.github.review_threads import issue_comments, review_threads, reviews
from bot.jobs.feedback_stories import Rules, Waiting, feedback_stories
from bot.jobs.job_frame import Answer
from bot.jobs.pr_stories import run_added_stories
from bot.jobs.preflight import ROLES, Refusal, check_permission, find_run, repo_context
from bot.jobs.runtime import Runtime
from bot.requests import RunRequest
from bot.stores.ci_fixes import CiFixes
from bot.stores.feedback_waiting import FeedbackWaiting
from worker.model.feedback import next_feedback_number

log = logging.getLogger(__name__)

NOT_A_PULL = "`/reqdrive fix` works on a reqdrive pull request, not on an issue."


def handle_feedback(rt: Runtime, client: RepoClient, request: RunRequest) -> Answer:
    """Who asked may; the run is idle (else the request waits for it); what waits on the
    pull request becomes FB- stories, run on its branch and answered where they were asked."""
    ctx = repo_context(client)
    check_permission(client, request.sender, ctx.config.required_permission)
    if request.requirement is not None or request.issue_number is None:
        raise Refusal(NOT_A_PULL)
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
        threads=review_threads(client, number),
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
        return {"status": "no feedback waiting", "run_id": record.run_id}
    head = client.read(lambda: client.repo.get_pull(number)).head.sha if handed_off else None
    added = run_added_stories(rt, client, record, stories, labels=ctx.config.pr_labels, head=head)
    result = added.result
    status = "finished" if result is not None else "failed"
    if not added.story_ids:
        status = "no feedback waiting"
    return {"status": status, "run_id": record.run_id, "stories": added.story_ids}


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
