"""What every job does around its handler: check the request, acknowledge it, refuse or report."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from rq import get_current_job

from bot.github.auth import CI_PERMISSIONS, REPLY_PERMISSIONS, RUN_PERMISSIONS
from bot.github.client import RepoClient
from bot.jobs.drive import AlreadyRunning
from bot.jobs.preflight import Refusal, is_bot
from bot.jobs.runtime import Runtime, current
from bot.requests import JobKind, RunRequest

log = logging.getLogger(__name__)

ALREADY_RUNNING = (
    "A run of this requirement is already going (`{run_id}`); comment `/reqdrive status` to "
    "see it, or `/reqdrive cancel` to stop it."
)
REPLY_MARKER = "<!-- reqdrive:reply {key} -->"
JOB_ERROR = (
    "reqdrive could not finish this: an unexpected error (`{error}`) stopped job `{job_id}`. "
    "The worker's log has the details; trigger it again once that is fixed."
)

# What a job returns: RQ keeps it as the job's result (`rq job` shows it).
Answer = dict[str, object]
Handler = Callable[[Runtime, RepoClient, RunRequest], Answer]
PERMISSIONS = {
    JobKind.RUN: RUN_PERMISSIONS,
    JobKind.RETRY: RUN_PERMISSIONS,
    JobKind.PLAN: RUN_PERMISSIONS,
    JobKind.CI_FIX: CI_PERMISSIONS,
    JobKind.FEEDBACK: RUN_PERMISSIONS,
}
# GitHub's own events, not requests by a person: a merge queue's bot may close a PR too.
# CI completing is GitHub's too (its sender is whoever pushed: reqdrive itself, after a fix),
# and a push hands a PR off without a 👀 on it.
LIFECYCLE_KINDS = frozenset({JobKind.CLOSE, JobKind.UNINSTALL, JobKind.CI_FIX, JobKind.HANDOFF})


def run_job(kind: JobKind, arguments: dict[str, Any], handler: Handler) -> Answer:
    """The request checked and acknowledged, then `handler`; a refusal or a failure said once."""
    request = RunRequest.model_validate(arguments)
    if request.kind is not kind:
        raise ValueError(f"a {request.kind} request reached the {kind} job")
    if is_bot(request.sender) and kind not in LIFECYCLE_KINDS:
        return {"status": "ignored: sent by a bot"}
    if request.installation_id is None:
        raise ValueError("a job needs the installation that sent the delivery")
    rt = current()
    taken_over = _run_started_before(rt)
    if taken_over is not None:
        log.info(
            "job ran again after its run started; the sweeper resumes runs",
            extra={"run_id": taken_over},
        )
        return {"status": "left to the recovery sweeper", "run_id": taken_over}
    permissions = PERMISSIONS.get(kind, REPLY_PERMISSIONS)
    client = rt.app.client(request.installation_id, request.repo, permissions)
    _acknowledge(client, request)
    try:
        return handler(rt, client, request)
    except Refusal as refusal:
        _refuse(client, request, refusal, checks=permissions.get("checks") == "write")
        return {"status": "refused", "reason": refusal.message}
    except AlreadyRunning as running:
        reply(client, request, ALREADY_RUNNING.format(run_id=running))
        return {"status": "already running"}
    except Exception as error:
        if _last_attempt():  # RQ retries it otherwise (RUN_RETRY, COMMAND_RETRY): say it once
            _report_error(client, request, error)
        raise


def _run_started_before(rt: Runtime) -> str | None:
    """The run an earlier execution of this very job started, if it got as far as a checkpoint.

    RQ executes a job again when its work horse died (the worker notices at once) or when rq's
    cleanup finds it abandoned, as long as its Retry has attempts left; jobs queued before
    RUN_RETRY changed keep theirs. A run with a checkpoint is the recovery sweeper's to resume
    (bot/jobs/recovery.py) or has ended: running it here too would be a second run beside the
    resumed one, or an "already running" reply to a person who asked for nothing. A run killed
    before its checkpoint existed is not the sweeper's (it forgets runs without one), so RQ's
    retry is what runs it.
    """
    job = get_current_job()
    run_id = job.meta.get("run_id") if job is not None else None
    if isinstance(run_id, str) and rt.checkpoints.load(run_id) is not None:
        return run_id
    return None


def _last_attempt() -> bool:
    job = get_current_job()
    return job is None or not job.retries_left


def _report_error(client: RepoClient, request: RunRequest, error: Exception) -> None:
    """One comment naming the error's kind (its text may hold what must not be posted)."""
    job = get_current_job()
    text = JOB_ERROR.format(error=type(error).__name__, job_id=job.id if job else "-")
    try:
        if request.issue_number is not None:
            reply(client, request, text)
        elif request.head_sha:
            client.commit_comment(request.head_sha, text)
    except Exception:  # GitHub itself may be what failed; the log has it
        log.warning("error report failed", extra={"repo": request.repo})


def _acknowledge(client: RepoClient, request: RunRequest) -> None:
    """👀 on what triggered the job, before anything slow: the person sees it was heard."""
    if request.issue_number is None or request.kind in LIFECYCLE_KINDS:
        return  # a push has no issue or comment to react on
    try:
        client.react(request.issue_number, request.comment_id, "eyes")
    except Exception:  # the reaction is a courtesy; the job's own reply says what happened
        log.warning("reaction failed", extra={"repo": request.repo})


def reply(client: RepoClient, request: RunRequest, text: str) -> None:
    if request.issue_number is None:
        return
    key = request.comment_id or request.delivery_id
    client.reply(request.issue_number, text, marker=REPLY_MARKER.format(key=key))


def _from_review(request: RunRequest) -> bool:
    return request.review_id is not None or request.review_comment_id is not None


def _refuse(client: RepoClient, request: RunRequest, refusal: Refusal, *, checks: bool) -> None:
    """The reply (or commit comment) saying why; and a check run, if this job's token may write
    one: a `/reqdrive status` or `cancel` token has no `checks`, and GitHub would answer 403."""
    if not refusal.message:
        return  # dropped on purpose (a push outside requirementsDir)
    if request.issue_number is not None and request.comment_id is None and _from_review(request):
        # A review's body and each of its line comments arrive as deliveries of their own:
        # the reviewer is refused once per pull request, not once per thread. (A command
        # comment has its own reply, like any command.)
        marker = REPLY_MARKER.format(key=f"feedback-refused-{request.sender}")
        client.reply(request.issue_number, refusal.message, marker=marker)
    elif request.issue_number is not None:
        reply(client, request, refusal.message)
    elif request.head_sha:
        client.commit_comment(request.head_sha, refusal.message)
    if refusal.check and checks:
        sha = request.head_sha or _default_head(client)
        if sha:
            client.create_check_run(
                sha=sha,
                external_id=f"refused-{request.delivery_id}",
                status="completed",
                conclusion=refusal.check,
                output={"title": "reqdrive did not run", "summary": refusal.message},
            )


def _default_head(client: RepoClient) -> str | None:
    try:
        return client.branch_sha(client.read(lambda: client.repo.default_branch))
    except Exception:
        return None
