"""Red CI on a reqdrive pull request: a CI-fix story on its branch, or the reason there is none.

A failure of CI that is not reqdrive's on the PR's head, with `ciFix` on and attempts left,
appends a story (CI-001, CI-002 ...) to the run's plan and runs it as `/reqdrive retry` runs a
story: on the PR branch, judged by the worker, pushed, the PR, progress comment and check run
updated. It stops, saying which in one comment and a check run, when the attempts are spent,
when CI goes green after a fix, or when a person pushed to the branch (handed off). A result
arriving while a run of the pull request is going waits for the run to end, then is decided
on the head the run ended on (bot/stores/ci_waiting.py); one on an older head is dropped.
"""

from __future__ import annotations

import logging
import unicodedata

from bot.github.ci_runs import failed_checks, head_checks
from bot.github.client import RepoClient
from bot.github.head_check import conclude_on_head
from bot.jobs.ci_logs import CiFailure, read_failure
from bot.jobs.ci_unstarted import take_back_unstarted
from bot.jobs.drive import queue_waiting_ci
from bot.jobs.job_frame import Answer, reply
from bot.jobs.pr_stories import run_added_stories
from bot.jobs.preflight import Refusal, repo_context, run_of_pull
from bot.jobs.runtime import Runtime
from bot.requests import RunRequest
from bot.stores.ci_fixes import CiFixes
from bot.stores.ci_waiting import CiWaiting
from bot.stores.runs import RunRecord
from worker.confine.redact import Redactor
from worker.model.feedback import CiCheck
from worker.model.state import StoryRecord
from worker.report.inert_text import neutralize

log = logging.getLogger(__name__)

STORY_PREFIX = "CI"
CHECK_TITLE = "reqdrive: CI fix"
HANDED_OFF = (
    "🤝 CI failed on `{sha}`, but {who} pushed to this branch, so the pull request is "
    "theirs: reqdrive fixes no CI here. Comment `/reqdrive fix` to ask it to again."
)
SPENT = (
    "🛑 CI failed {n} after reqdrive's fixes: handing back. The failing checks: "
    "{checks}. Comment `/reqdrive fix` to have reqdrive try again."
)
GREEN = "✅ CI is green on `{sha}` after reqdrive's fix."
CI_NOTE = "🔴 CI failed on `{sha}` ({checks}): {story} fixes it (attempt {n} of {of})."
# A check run still going, or one of these: CI is not green yet.
NOT_GREEN = frozenset({"failure", "timed_out", "cancelled", "action_required", "stale"})


def handle_ci_fix(rt: Runtime, client: RepoClient, request: RunRequest) -> Answer:
    number, head = request.issue_number, request.head_sha
    if number is None or head is None:
        raise ValueError("a ci_fix job needs the pull request and its head commit")
    try:
        record = run_of_pull(client, rt.records, number)
    except Refusal as refusal:  # not reqdrive's, closed, expired: CI there is not ours to fix
        return {"status": f"ignored: {refusal.message}"}
    pull = client.read(lambda: client.repo.get_pull(number))
    if pull.head.sha != head:
        extra = {"run_id": record.run_id, "head": head, "conclusion": request.conclusion}
        log.info("ci result superseded: the pull request's head moved on", extra=extra)
        return {"status": "ignored: the pull request's head moved on; its own CI will tell"}
    if rt.records.alive(record.run_id):
        return _after_the_run(rt, record, request)
    store = CiFixes(rt.conn)
    if request.conclusion == "success":
        return _green(rt, client, record, request, store)
    who = store.handed_off(request.repo, number)
    if who is not None:
        if store.say_once(request.repo, number, "handed_off"):
            _stop(rt, client, record, request, HANDED_OFF.format(sha=head[:12], who=_login(who)))
        return {"status": "handed off", "to": who}
    ctx = repo_context(client)
    if not ctx.config.ci_fix:
        return {"status": "ignored: ciFix is off"}
    failure = read_failure(
        failed_checks(
            client,
            workflow_run_id=request.workflow_run_id,
            check_suite_id=request.check_suite_id,
        ),
        _redactor(rt),
    )
    spent = store.attempts(request.repo, number)
    if spent >= ctx.config.ci_fix_attempts:
        if store.say_once(request.repo, number, "spent"):
            checks = ", ".join(f"`{neutralize(c)}`" for c in failure.checks) or "see CI"
            times = f"{spent} time" + ("s" if spent != 1 else "")
            _stop(rt, client, record, request, SPENT.format(n=times, checks=checks))
        return {"status": "attempts spent", "attempts": spent}
    if not failure.checks:
        return {"status": "ignored: GitHub lists no failed job for it"}
    # Claimed once the failure is read: a job retried after GitHub failed it may claim again.
    if not store.claim_head(request.repo, number, head):
        return {"status": "ignored: this head's CI failure was taken up already"}
    return _fix(rt, client, record, request, failure, spent + 1, ctx.config.ci_fix_attempts)


def _after_the_run(rt: Runtime, record: RunRecord, request: RunRequest) -> Answer:
    """A run of the pull request is going: its CI result waits for the run to end, which
    queues it again (bot/jobs/drive.py); then the head the run ended on decides. Kept is the
    newest head's (a failure and a success); an older head's, its push superseded."""
    head = request.head_sha or ""
    older = CiWaiting(rt.conn).put(
        record.run_id,
        head,
        success=request.conclusion == "success",
        request_json=request.model_dump_json(),
    )
    extra = {"run_id": record.run_id, "head": head, "conclusion": request.conclusion}
    log.info("ci result waits for the run", extra=extra)
    if older is not None:
        log.info("ci result superseded: a newer head's waits", extra={**extra, "head": older})
    if not rt.records.alive(record.run_id):  # it ended meanwhile, maybe before it looked
        queue_waiting_ci(rt, record)
    return {"status": "queued after the running run", "run_id": record.run_id}


def _fix(
    rt: Runtime,
    client: RepoClient,
    record: RunRecord,
    request: RunRequest,
    failure: CiFailure,
    attempt: int,
    attempts: int,
) -> Answer:
    cp = rt.checkpoints.load(record.run_id)
    if cp is None or cp.prd is None:
        return {"status": "ignored: the run has no checkpoint to add a story to"}
    story = ci_story(cp.next_story_id(STORY_PREFIX), failure, priority=_after(cp.stories))
    CiFixes(rt.conn).add_attempt(request.repo, request.issue_number or 0)
    checks = ", ".join(f"`{neutralize(c)}`" for c in failure.checks)
    note = CI_NOTE.format(
        sha=(request.head_sha or "")[:12], checks=checks, story=story.id, n=attempt, of=attempts
    )
    labels = record.arguments.get("labels", ())
    added = run_added_stories(
        rt, client, record, [story], labels=labels, head=request.head_sha, note=note
    )
    result = added.result
    if result is None:  # stopped before the story (its workspace): no attempt spent
        unstarted = take_back_unstarted(rt, client, record, request, story.id)
        if unstarted is not None:
            return unstarted
    status = "failed" if result is None else "finished"
    return {"status": status, "run_id": record.run_id, "story": story.id}


def ci_story(story_id: str, failure: CiFailure, *, priority: int) -> StoryRecord:
    """The story that makes CI pass again; its description is CI's own failing part."""
    names = ", ".join(failure.checks)
    title = " ".join(f"Make the failing CI checks pass: {names}".split())  # one line
    if len(title) > 200:
        title = title[:197] + "..."
    description = (
        "The repository's CI failed on this pull request's branch. What it said (redacted, "
        "the failing part only):\n\n" + failure.report
    )
    criteria = [
        " ".join(f"The CI checks that failed pass: {names}".split())[:1000],
        "Every test that passed before still passes",
    ]
    if failure.test_ids:
        criteria.append("These tests pass: " + ", ".join(failure.test_ids)[:900])
    return StoryRecord(
        id=story_id,
        title=_printable(title),
        description=_printable(description)[:10_000],
        acceptance_criteria=[_printable(c) for c in criteria],
        priority=priority,
        ci=CiCheck(checks=failure.checks, candidates=failure.test_ids),
    )


def _green(
    rt: Runtime, client: RepoClient, record: RunRecord, request: RunRequest, store: CiFixes
) -> Answer:
    """A success on the head: said once, when reqdrive fixed CI here and every other check
    on the head has completed without failing."""
    number, head = request.issue_number or 0, request.head_sha or ""
    if store.attempts(request.repo, number) == 0:
        return {"status": "ignored: green, and reqdrive fixed nothing here"}
    checks = head_checks(client, head)
    if any(c.status != "completed" or c.conclusion in NOT_GREEN for c in checks):
        return {"status": "ignored: other checks on the head are not green (yet)"}
    if store.say_once(request.repo, number, f"green:{head}"):
        said = GREEN.format(sha=head[:12])
        _stop(rt, client, record, request, said, conclusion="success", keep_verdict=True)
    return {"status": "green"}


def _stop(
    rt: Runtime,
    client: RepoClient,
    record: RunRecord,
    request: RunRequest,
    text: str,
    conclusion: str = "neutral",
    keep_verdict: bool = False,
) -> None:
    """One short comment on the pull request, and the run's check run on its head saying the
    same (one "reqdrive" check run per head: bot/github/head_check.py)."""
    reply(client, request, text)
    sha = request.head_sha or ""
    check_id = conclude_on_head(
        client,
        record,
        sha,
        conclusion=conclusion,
        title=CHECK_TITLE,
        summary=text,
        keep_verdict=keep_verdict,
    )
    # The record follows it, so a run ending on this head later completes this one too; a
    # run going keeps the record its own.
    if rt.records.alive(record.run_id):
        return
    fresh = rt.records.load(record.run_id)
    if fresh is not None and (fresh.check_run_id, fresh.check_sha) != (check_id, sha):
        fresh.check_run_id, fresh.check_sha, fresh.annotated = check_id, sha, []
        rt.records.save(fresh)


def _after(stories: list[StoryRecord]) -> int:
    return max((s.priority for s in stories), default=0) + 1


def _login(who: str) -> str:
    return f"`{neutralize(who)}`"


def _printable(text: str) -> str:
    """CI logs carry ANSI colours and other control characters a story's text refuses."""
    return "".join(
        ch for ch in text if ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cf")
    )


def _redactor(rt: Runtime) -> Redactor:
    settings = rt.settings
    secrets = [
        s.get_secret_value()
        for s in (settings.github_webhook_secret, settings.github_private_key)
        if s is not None
    ]
    return Redactor([*secrets, *([settings.redis_url] if settings.redis_url else [])])


def handle_hand_off(rt: Runtime, client: RepoClient, request: RunRequest) -> Answer:
    """A person pushed to a reqdrive branch: its open pull request is theirs from now on."""
    if request.branch is None:
        raise ValueError("a hand-off job needs the branch pushed to")
    pull = client.find_pull(request.branch)
    if pull is None:
        return {"status": "ignored: no open pull request for the branch"}
    CiFixes(rt.conn).hand_off(request.repo, pull.number, request.sender)
    return {"status": "handed off", "pull": pull.number, "to": request.sender}
