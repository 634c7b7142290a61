"""Thin RQ entry points: plain JSON keyword arguments in, GitHub and the engine driven from here."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from rq import get_current_job

from bot.github.auth import REPLY_PERMISSIONS, RUN_PERMISSIONS
from bot.github.client import RepoClient
from bot.github.progress import PROGRESS_MARKER, Progress
from bot.jobs.drive import AlreadyRunning, execute, reset_stories
from bot.jobs.preflight import (
    Refusal,
    RepoContext,
    check_permission,
    file_requirement,
    find_run,
    is_bot,
    issue_requirement,
    repo_context,
    run_id_for,
)
from bot.jobs.push_scan import changed_requirement_files
from bot.jobs.runtime import Runtime, current
from bot.requests import JobKind, RunRequest
from bot.stores.runs import RunRecord
from bot.web.enqueue import Enqueuer
from worker.run.spec import Requirement

log = logging.getLogger(__name__)

ALREADY_RUNNING = (
    "A run of this requirement is already going (`{run_id}`); comment `/reqdrive status` to "
    "see it, or `/reqdrive cancel` to stop it."
)
CANCELLING = (
    "Cancelling: the agent is stopped, what passed is pushed and the pull request stays a "
    "draft. The progress comment will say when it is done."
)
REPLY_MARKER = "<!-- reqdrive:reply {key} -->"
JOB_ERROR = (
    "reqdrive could not finish this: an unexpected error (`{error}`) stopped job `{job_id}`. "
    "The worker's log has the details; trigger it again once that is fixed."
)
HELP = """reqdrive understands these commands (on a requirement issue or a reqdrive pull request):

- `/reqdrive run`: build this issue's requirement (the same as adding the trigger label)
- `/reqdrive plan`: plan the requirement into stories and post them, building nothing
- `/reqdrive retry US-003`: run that story again (attempts reset), then the final checks
- `/reqdrive retry`: run every story that did not pass again
- `/reqdrive cancel`: stop the running run; what passed is pushed and the PR stays a draft
- `/reqdrive status`: reply with the run's state
- `/reqdrive help`: this list"""


def run_requirement(**arguments: Any) -> dict[str, object]:
    """Plan (if needed) and implement one requirement."""
    return _job(JobKind.RUN, arguments, _run)


def retry_stories(**arguments: Any) -> dict[str, object]:
    """Re-run one story ("/reqdrive retry US-003") or every failed one."""
    return _job(JobKind.RETRY, arguments, _retry)


def plan_requirement(**arguments: Any) -> dict[str, object]:
    """Plan only and post the stories for review."""
    return _job(JobKind.PLAN, arguments, _plan)


def cancel_run(**arguments: Any) -> dict[str, object]:
    """Stop the requirement's run; it keeps what passed."""
    return _job(JobKind.CANCEL, arguments, _cancel)


def report_status(**arguments: Any) -> dict[str, object]:
    """Reply with the requirement's run state."""
    return _job(JobKind.STATUS, arguments, _status)


def reply_help(**arguments: Any) -> dict[str, object]:
    """Reply with the commands reqdrive understands."""
    return _job(JobKind.HELP, arguments, _help)


def close_run(**arguments: Any) -> dict[str, object]:
    """A reqdrive pull request was closed or merged: its run stops (what passed stays pushed)."""
    return _job(JobKind.CLOSE, arguments, _close)


def drop_installation(**arguments: Any) -> dict[str, object]:
    """The App was uninstalled: its tokens are forgotten and its running runs stopped. No API
    call: the installation's tokens stopped working with the uninstall."""
    request = RunRequest.model_validate(arguments)
    if request.kind is not JobKind.UNINSTALL or request.installation_id is None:
        raise ValueError(f"a {request.kind} request reached the uninstall job")
    rt = current()
    dropped = rt.app.auth.drop_installation(request.installation_id)
    stopped = []
    for run_id in rt.records.active():
        record = rt.records.load(run_id)
        if record is not None and record.installation_id == request.installation_id:
            rt.records.request_cancel(run_id)
            stopped.append(run_id)
    rt.writes.forget(request.installation_id)
    log.info("installation dropped", extra={"installation_id": request.installation_id,
                                            "runs": stopped})  # fmt: skip
    return {"status": "dropped", "tokens": dropped, "runs_stopped": stopped}


def scan_push(**arguments: Any) -> dict[str, object]:
    """A push whose payload may not list every file, or that names a requirement outside the
    default folder: read the repository's requirementsDir, ask GitHub which requirement files
    the push changed there and queue their runs as intake would have (same job ids, dedupe,
    coalescing)."""
    return _job(JobKind.SCAN, arguments, _scan)


def resume_run(run_id: str) -> dict[str, object]:
    """Take over a run whose worker stopped beating (killed, machine gone), from its checkpoint."""
    rt = current()
    record = rt.records.load(run_id)
    if record is None:
        return {"status": "unknown run"}
    client = rt.app.client(record.installation_id, record.repo, RUN_PERMISSIONS)
    record.resumed += 1
    note = (
        f"♻️ The worker running this stopped without finishing; another worker resumed the run "
        f"from its checkpoint (takeover {record.resumed})."
    )
    try:
        result = execute(rt, client, record, labels=record.arguments.get("labels", ()), note=note)
    except AlreadyRunning:
        return {"status": "running elsewhere"}
    return {"status": "finished" if result else "failed", "run_id": run_id}


# the jobs -----------------------------------------------------------------------------------

Handler = Callable[[Runtime, RepoClient, RunRequest], dict[str, object]]
PERMISSIONS = {JobKind.RUN: RUN_PERMISSIONS, JobKind.RETRY: RUN_PERMISSIONS,
               JobKind.PLAN: RUN_PERMISSIONS}  # fmt: skip


# GitHub's own events, not requests by a person: a merge queue's bot may close a PR too.
LIFECYCLE_KINDS = frozenset({JobKind.CLOSE, JobKind.UNINSTALL})


def _job(kind: JobKind, arguments: dict[str, Any], handler: Handler) -> dict[str, object]:
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
        log.info("job ran again after its run started; the sweeper resumes runs",
                 extra={"run_id": taken_over})  # fmt: skip
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
        _reply(client, request, ALREADY_RUNNING.format(run_id=running))
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
            _reply(client, request, text)
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


def _authorized(client: RepoClient, request: RunRequest) -> RepoContext:
    ctx = repo_context(client)
    check_permission(client, request.sender, ctx.config.required_permission)
    return ctx


def _run(rt: Runtime, client: RepoClient, request: RunRequest) -> dict[str, object]:
    ctx = _authorized(client, request)
    if request.requirement is None:  # `/reqdrive run` on a PR: that PR's run again
        record = find_run(client, rt.records, request)
        return _execute(rt, client, record, ctx)
    requirement = _requirement(client, request, ctx)
    record = _record(rt, client, request, ctx, requirement)
    return _execute(rt, client, record, ctx)


def _retry(rt: Runtime, client: RepoClient, request: RunRequest) -> dict[str, object]:
    ctx = _authorized(client, request)
    record = find_run(client, rt.records, request)
    if rt.records.alive(record.run_id):
        raise AlreadyRunning(record.run_id)
    wanted = [request.story_id] if request.story_id else None
    reset = reset_stories(rt, record.run_id, wanted)
    if not reset:
        what = f"`{request.story_id}` is not a story of this run" if request.story_id else (
            "every story of this run passed")  # fmt: skip
        raise Refusal(f"Nothing to retry: {what}.")
    record.arguments = {**record.arguments, "retry": reset}
    return _execute(rt, client, record, ctx)


def _plan(rt: Runtime, client: RepoClient, request: RunRequest) -> dict[str, object]:
    ctx = _authorized(client, request)
    if request.requirement is None:
        raise Refusal("`/reqdrive plan` works on a requirement issue, not on a pull request.")
    record = _record(rt, client, request, ctx, _requirement(client, request, ctx))
    result = execute(rt, client, record, plan_only=True)
    return {"status": "planned" if result else "failed", "run_id": record.run_id}


def _scan(rt: Runtime, client: RepoClient, request: RunRequest) -> dict[str, object]:
    if request.head_sha is None:
        raise ValueError("a scan job needs the pushed commit")
    # The config the runs will be judged by: file_requirement reads it from the default
    # branch too, and this push went to that branch.
    requirements_dir = repo_context(client).config.requirements_dir
    paths = changed_requirement_files(client, request.base_sha, request.head_sha, requirements_dir)
    if not paths:
        return {"status": "no requirement changed"}
    runs = [
        request.model_copy(update={"kind": JobKind.RUN, "requirement": path, "base_sha": None})
        for path in paths
    ]
    # The scan's own delivery id, so GitHub redelivering the push (a new scan) is deduped too.
    timeout_s = math.ceil(rt.settings.reqdrive_job_timeout_hours * 3600)  # as bot/web/app.py
    enqueuer = Enqueuer(rt.conn, rt.settings.reqdrive_queue, timeout_s)
    accepted = enqueuer.accept(f"{request.delivery_id}:scan", runs)
    return {"status": "queued", "jobs": [job.id for job in accepted.jobs]}


def _cancel(rt: Runtime, client: RepoClient, request: RunRequest) -> dict[str, object]:
    ctx = _authorized(client, request)
    del ctx
    record = find_run(client, rt.records, request)
    if not rt.records.alive(record.run_id):
        raise Refusal("No run of this requirement is going, so there is nothing to cancel.")
    rt.records.request_cancel(record.run_id)
    _reply(client, request, CANCELLING)
    return {"status": "cancel requested", "run_id": record.run_id}


def _close(rt: Runtime, client: RepoClient, request: RunRequest) -> dict[str, object]:
    record = rt.records.for_branch(request.repo, request.branch or "")
    if record is None or not rt.records.alive(record.run_id):
        return {"status": "nothing running"}
    rt.records.request_cancel(record.run_id)
    return {"status": "cancel requested", "run_id": record.run_id}


def _status(rt: Runtime, client: RepoClient, request: RunRequest) -> dict[str, object]:
    record = find_run(client, rt.records, request)
    cp = rt.checkpoints.load(record.run_id)
    progress = Progress(record.source, record.branch, stories=list(cp.stories) if cp else [])
    state = "running" if rt.records.alive(record.run_id) else (
        str(cp.status) if cp else "not started")  # fmt: skip
    progress.status = f"**Run `{record.run_id}`: {state}**" + (
        f", at the {cp.step} step" if cp else "")  # fmt: skip
    if record.pull_number:
        progress.notes.append(f"Pull request: #{record.pull_number}")
    body = progress.render(record.run_id).replace(PROGRESS_MARKER.format(run_id=record.run_id), "")
    _reply(client, request, body.strip())
    return {"status": state, "run_id": record.run_id}


def _help(rt: Runtime, client: RepoClient, request: RunRequest) -> dict[str, object]:
    _reply(client, request, HELP)
    return {"status": "replied"}


# helpers ------------------------------------------------------------------------------------


def _requirement(client: RepoClient, request: RunRequest, ctx: RepoContext) -> Requirement:
    source = request.requirement or ""
    if source.startswith("ISSUE-") and request.issue_number is not None:
        return issue_requirement(client, request.issue_number)
    return file_requirement(client, source, request.head_sha or ctx.default_branch, ctx)


def _record(
    rt: Runtime, client: RepoClient, request: RunRequest, ctx: RepoContext, req: Requirement
) -> RunRecord:
    run_id = run_id_for(request.repo, req)
    known = rt.records.load(run_id)
    if known is not None:
        return known
    on_issue = req.source.startswith("ISSUE-")
    previous = rt.records.for_source(request.repo, req.source)  # an earlier text of this file
    pull = previous.pull_number if previous else None
    target = request.issue_number if on_issue else pull
    # The new text's run reports in the progress comment the earlier text's run kept there:
    # the marker names a run, so without its id the new run would post a second comment.
    comment = previous.comment_id if previous and previous.comment_target == target else None
    return RunRecord(
        run_id=run_id,
        repo=request.repo,
        installation_id=request.installation_id or 0,
        source=req.source,
        text=req.text,
        slug=req.slug,
        repo_path=req.repo_path,
        branch=f"reqdrive/{req.slug}",
        base_branch=ctx.base_branch,
        clone_url=client.read(lambda: client.repo.clone_url),
        issue_number=request.issue_number if on_issue else None,
        comment_target=target,
        comment_id=comment,
        pull_number=pull,
        arguments={**request.model_dump(mode="json"), "labels": list(ctx.config.pr_labels)},
    )


def _execute(
    rt: Runtime, client: RepoClient, record: RunRecord, ctx: RepoContext
) -> dict[str, object]:
    result = execute(rt, client, record, labels=ctx.config.pr_labels)
    if result is None:
        return {"status": "failed", "run_id": record.run_id}
    return {"status": "finished", "run_id": record.run_id, "ready": result.ready}


def _reply(client: RepoClient, request: RunRequest, text: str) -> None:
    if request.issue_number is None:
        return
    key = request.comment_id or request.delivery_id
    client.reply(request.issue_number, text, marker=REPLY_MARKER.format(key=key))


def _refuse(client: RepoClient, request: RunRequest, refusal: Refusal, *, checks: bool) -> None:
    """The reply (or commit comment) saying why; and a check run, if this job's token may write
    one: a `/reqdrive status` or `cancel` token has no `checks`, and GitHub would answer 403."""
    if not refusal.message:
        return  # dropped on purpose (a push outside requirementsDir)
    if request.issue_number is not None:
        _reply(client, request, refusal.message)
    elif request.head_sha:
        client.commit_comment(request.head_sha, refusal.message)
    if refusal.check and checks:
        sha = request.head_sha or _default_head(client)
        if sha:
            client.create_check_run(
                sha=sha, external_id=f"refused-{request.delivery_id}", status="completed",
                conclusion=refusal.check, output={"title": "reqdrive did not run",
                                                  "summary": refusal.message},
            )  # fmt: skip


def _default_head(client: RepoClient) -> str | None:
    try:
        return client.branch_sha(client.read(lambda: client.repo.default_branch))
    except Exception:
        return None
