"""What each job does once let in: run, retry, plan, scan, cancel, close, status, help."""

from __future__ import annotations

from bot.github.client import RepoClient
from bot.github.progress import PROGRESS_MARKER, Progress
from bot.jobs.drive import AlreadyRunning, execute, reset_stories
from bot.jobs.job_frame import Answer, reply
from bot.jobs.lifecycle import close_pull
from bot.jobs.preflight import (
    Refusal,
    RepoContext,
    check_permission,
    file_requirement,
    find_run,
    issue_requirement,
    repo_context,
    run_id_for,
)
from bot.jobs.push_scan import changed_requirement_files
from bot.jobs.runtime import Runtime
from bot.requests import JobKind, RunRequest
from bot.stores.runs import RunRecord
from bot.stores.spend import month_of
from bot.web.enqueue import Enqueuer
from worker.run.spec import Requirement

CANCELLING = (
    "Cancelling: the agent is stopped, what passed is pushed and the pull request stays a "
    "draft. The progress comment will say when it is done."
)
HELP = """reqdrive understands these commands (on a requirement issue or a reqdrive pull request):

- `/reqdrive run`: build this issue's requirement (the same as adding the trigger label)
- `/reqdrive plan`: plan the requirement into stories and post them, building nothing
- `/reqdrive retry US-003`: run that story again (attempts reset), then the final checks
- `/reqdrive retry`: run every story that did not pass again
- `/reqdrive fix [what to change]` (on the pull request, or in a review thread): answer the
  unresolved review threads (and this text) as stories `FB-001`…, each judged on its tests,
  replied to in its thread and resolved when it passed; a review requesting changes, or a
  line comment mentioning the App, does the same
- `/reqdrive cancel`: stop the running run; what passed is pushed and the PR stays a draft
- `/reqdrive status`: reply with the run's state and what its agents cost
- `/reqdrive help`: this list"""


def handle_run(rt: Runtime, client: RepoClient, request: RunRequest) -> Answer:
    ctx = _authorized(client, request)
    if request.requirement is None:  # `/reqdrive run` on a PR: that PR's run again
        record = find_run(client, rt.records, request)
        return _execute(rt, client, record, ctx)
    requirement = _requirement(client, request, ctx)
    record = _record(rt, client, request, ctx, requirement)
    return _execute(rt, client, record, ctx)


def handle_retry(rt: Runtime, client: RepoClient, request: RunRequest) -> Answer:
    ctx = _authorized(client, request)
    record = find_run(client, rt.records, request)
    if rt.records.alive(record.run_id):
        raise AlreadyRunning(record.run_id)
    wanted = [request.story_id] if request.story_id else None
    reset = reset_stories(rt, record.run_id, wanted)
    if not reset:
        what = "every story of this run passed"
        if request.story_id:
            what = f"`{request.story_id}` is not a story of this run"
        raise Refusal(f"Nothing to retry: {what}.")
    record.arguments = {**record.arguments, "retry": reset}
    return _execute(rt, client, record, ctx)


def handle_plan(rt: Runtime, client: RepoClient, request: RunRequest) -> Answer:
    ctx = _authorized(client, request)
    if request.requirement is None:
        raise Refusal("`/reqdrive plan` works on a requirement issue, not on a pull request.")
    record = _record(rt, client, request, ctx, _requirement(client, request, ctx))
    result = execute(rt, client, record, plan_only=True)
    return {"status": "planned" if result else "failed", "run_id": record.run_id}


def handle_scan(rt: Runtime, client: RepoClient, request: RunRequest) -> Answer:
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
    enqueuer = Enqueuer(rt.conn, rt.settings.reqdrive_queue, rt.settings.job_timeout_s)
    accepted = enqueuer.accept(f"{request.delivery_id}:scan", runs)
    return {"status": "queued", "jobs": [job.id for job in accepted.jobs]}


def handle_cancel(rt: Runtime, client: RepoClient, request: RunRequest) -> Answer:
    ctx = _authorized(client, request)
    del ctx
    record = find_run(client, rt.records, request)
    if not rt.records.alive(record.run_id):
        raise Refusal("No run of this requirement is going, so there is nothing to cancel.")
    rt.records.request_cancel(record.run_id)
    reply(client, request, CANCELLING)
    return {"status": "cancel requested", "run_id": record.run_id}


def handle_close(rt: Runtime, client: RepoClient, request: RunRequest) -> Answer:
    return close_pull(rt, request, merged=bool(request.merged))


def handle_status(rt: Runtime, client: RepoClient, request: RunRequest) -> Answer:
    record = find_run(client, rt.records, request)
    cp = rt.checkpoints.load(record.run_id)
    progress = Progress(record.source, record.branch, stories=list(cp.stories) if cp else [])
    state = str(cp.status) if cp else "not started"
    if rt.records.alive(record.run_id):
        state = "running"
    at_step = f", at the {cp.step} step" if cp else ""
    progress.status = f"**Run `{record.run_id}`: {state}**{at_step}"
    if record.pull_number:
        progress.notes.append(f"Pull request: #{record.pull_number}")
    progress.notes.append(_spend(rt, record, cp.cost_usd if cp else 0.0))
    body = progress.render(record.run_id).replace(PROGRESS_MARKER.format(run_id=record.run_id), "")
    reply(client, request, body.strip())
    return {"status": state, "run_id": record.run_id}


def _spend(rt: Runtime, record: RunRecord, run_usd: float) -> str:
    """What this run's agents cost, and its installation's this month against its budget."""
    month = month_of(rt.spend.clock())
    total = rt.spend.total(record.installation_id)
    limit = rt.settings.installation_limits(record.installation_id).monthly_budget_usd
    cap = f" of its ${limit:.2f} monthly budget" if limit is not None else ""
    return (
        f"Agent spend: this run ${run_usd:.2f}; this installation ${total:.2f}{cap} in "
        f"{month} (UTC)."
    )


def handle_help(rt: Runtime, client: RepoClient, request: RunRequest) -> Answer:
    reply(client, request, HELP)
    return {"status": "replied"}


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
    if known is not None and rt.records.gone(run_id) is not None:
        # Its pull request was closed and its state removed: asked again on the issue, it
        # runs afresh from the branch as pushed, and opens a pull request of its own.
        rt.records.clear_gone(run_id)
        known.pull_number, known.check_run_id = None, None
    if known is not None:
        return known
    on_issue = req.source.startswith("ISSUE-")
    previous = rt.records.for_source(request.repo, req.source)  # an earlier text of this file
    pull = previous.pull_number if previous else None
    target = request.issue_number if on_issue else pull
    # The new text's run reports in the progress comment the earlier text's run kept there:
    # the marker names a run, so without its id the new run would post a second comment.
    comment = previous.comment_id if previous and previous.comment_target == target else None
    branch = f"reqdrive/{req.slug}"
    return RunRecord(
        run_id=run_id,
        repo=request.repo,
        installation_id=request.installation_id or 0,
        source=req.source,
        text=req.text,
        slug=req.slug,
        repo_path=req.repo_path,
        branch=branch,
        base_branch=ctx.base_branch,
        clone_url=client.read(lambda: client.repo.clone_url),
        issue_number=request.issue_number if on_issue else None,
        comment_target=target,
        comment_id=comment,
        pull_number=pull,
        previous_run=previous.run_id if previous and previous.branch == branch else None,
        arguments={**request.model_dump(mode="json"), "labels": list(ctx.config.pr_labels)},
    )


def _execute(
    rt: Runtime, client: RepoClient, record: RunRecord, ctx: RepoContext
) -> dict[str, object]:
    result = execute(rt, client, record, labels=ctx.config.pr_labels)
    if result is None:
        return {"status": "failed", "run_id": record.run_id}
    return {"status": "finished", "run_id": record.run_id, "ready": result.ready}


def _authorized(client: RepoClient, request: RunRequest) -> RepoContext:
    ctx = repo_context(client)
    check_permission(client, request.sender, ctx.config.required_permission)
    return ctx
