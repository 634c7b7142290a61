"""Decide which jobs a delivery asks for: pure functions from Event to RunRequests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bot.requests import JobKind, RunRequest
from bot.web.commands import mentions, parse_command
from bot.web.events import Event
from worker.model.requirement_files import (
    DEFAULT_REQUIREMENTS_DIR,
    is_requirement_file,
    is_requirement_name,
)

BRANCH_REF_PREFIX = "refs/heads/"
# A push webhook lists at most 2048 commits, and for a commit too large to diff in time GitHub
# leaves its file lists empty (the push schema says both). Such a payload cannot say which
# requirement files changed, so a job asks the compare API instead of guessing from it. (The
# Events API's `size`/`distinct_size` are not in the webhook's payload.)
PUSH_COMMITS_CAP = 2048
REQDRIVE_BRANCH_PREFIX = "reqdrive/"  # the branches reqdrive pushes and opens PRs from


@dataclass(frozen=True)
class TriggerContext:
    """What trigger rules need besides the event: the label and the App's own identity."""

    trigger_label: str = "reqdrive"
    app_slug: str | None = None
    app_id: int | None = None  # tells reqdrive's own check suites from others'


# A trigger is the job it asks for: the RunRequest the worker will receive.
Trigger = RunRequest
TriggerRule = Callable[[Event, TriggerContext], list[Trigger]]


def issue_labeled(event: Event, ctx: TriggerContext) -> list[Trigger]:
    """The trigger label added to an issue → run the issue as a requirement."""
    p = event.payload
    if (
        p.label is None
        or p.issue is None
        or p.label.name.casefold() != ctx.trigger_label.casefold()
        or p.sender is None
        or p.sender.is_bot  # an App (this one included) labelling an issue starts nothing
    ):
        return []
    number = p.issue.number
    return [_request(event, JobKind.RUN, requirement=f"ISSUE-{number}", issue_number=number)]


def push(event: Event, ctx: TriggerContext) -> list[Trigger]:
    """Requirement files added or modified on the default branch → one run per file."""
    p = event.payload
    if p.repository is None or p.deleted or _pushed_by_app(event, ctx):
        return []
    if p.ref and p.ref.startswith(BRANCH_REF_PREFIX + REQDRIVE_BRANCH_PREFIX):
        return _hand_off(event)
    default_branch = p.repository.default_branch
    # Without the default branch we cannot tell it from others (and must not compare the
    # ref with "refs/heads/None"); GitHub always sends it, so such a payload is not GitHub's.
    if not default_branch or p.ref != f"{BRANCH_REF_PREFIX}{default_branch}":
        return []  # other branches and tags (refs/tags/...) never trigger
    if not push_lists_every_file(event) and p.after:
        return [_scan(event, p.after)]
    paths = pushed_requirement_names(event)
    # Intake cannot read the repository's config (that needs the API): a requirement's name
    # outside the default requirementsDir may be in a custom one, so a job reads the config.
    if any(not is_requirement_file(path, DEFAULT_REQUIREMENTS_DIR) for path in paths) and p.after:
        return [_scan(event, p.after)]
    return [_request(event, JobKind.RUN, requirement=path, head_sha=p.after) for path in paths]


def push_lists_every_file(event: Event) -> bool:
    """False when the payload may leave changed files out: commits at the cap, or a commit
    whose file lists GitHub left empty."""
    commits = event.payload.commits
    if len(commits) >= PUSH_COMMITS_CAP:
        return False
    return all(c.added or c.modified or c.removed for c in commits)


def pushed_requirement_names(event: Event) -> list[str]:
    """Paths with a requirement's name, in any folder, that exist after the push, in
    first-touched order.

    Commits are in order, so a file added then removed within one push is not run.
    """
    present: dict[str, None] = {}
    for commit in event.payload.commits:
        for path in (*commit.added, *commit.modified):
            if is_requirement_name(path):
                present.setdefault(path)
        for path in commit.removed:
            present.pop(path, None)
    return list(present)


def comment_created(event: Event, ctx: TriggerContext) -> list[Trigger]:
    """A /reqdrive command in a new comment by a person → the job it names."""
    p = event.payload
    if p.comment is None or p.issue is None or p.comment.user.is_bot:
        return []  # bots, the App included, cannot drive reqdrive (no loops)
    command = parse_command(p.comment.body)
    if command is None:
        return []
    # On a pull request the job finds the requirement from the PR's branch and marker.
    requirement = None if p.issue.is_pull_request else f"ISSUE-{p.issue.number}"
    request = _request(
        event,
        command.kind,
        requirement=requirement,
        issue_number=p.issue.number,
        story_id=command.story_id,
        comment_id=p.comment.id,
    )
    return [request]


def review_submitted(event: Event, ctx: TriggerContext) -> list[Trigger]:
    """A review on a reqdrive PR that requests changes, mentions the App or says `/reqdrive
    fix` → a feedback run on its threads and its body."""
    p = event.payload
    pull, review = p.pull_request, p.review
    if pull is None or review is None or not _on_reqdrive_branch(event) or _by_bot(event):
        return []
    if review.user.is_bot:
        return []  # reqdrive's own reviews and other Apps' never start a run (no loops)
    body = review.body or ""
    asked = (
        review.state.casefold() == "changes_requested"
        or mentions(body, ctx.app_slug)
        or _asks_fix(body)
    )
    if not asked:
        return []  # an approval or a plain comment is a person's, not a request to reqdrive
    return [_request(event, JobKind.FEEDBACK, issue_number=pull.number, review_id=review.id)]


def review_comment_created(event: Event, ctx: TriggerContext) -> list[Trigger]:
    """A line comment on a reqdrive PR's diff that mentions the App or says `/reqdrive fix`
    → a feedback run on its thread (and every other unanswered one)."""
    p = event.payload
    pull, comment = p.pull_request, p.comment
    if pull is None or comment is None or not _on_reqdrive_branch(event) or _by_bot(event):
        return []
    if comment.user.is_bot:
        return []
    # A reply in a thread ("still wrong") may answer reqdrive's own reply there without
    # naming it; intake cannot see the thread, so the job reads it and drops a reply in a
    # thread reqdrive never spoke in, silently (bot/jobs/feedback.py `addressed`).
    asked = mentions(comment.body, ctx.app_slug) or _asks_fix(comment.body)
    if not asked and comment.in_reply_to_id is None:
        return []
    return [
        _request(event, JobKind.FEEDBACK, issue_number=pull.number, review_comment_id=comment.id)
    ]


def _asks_fix(body: str) -> bool:
    command = parse_command(body)
    return command is not None and command.kind is JobKind.FEEDBACK


def _on_reqdrive_branch(event: Event) -> bool:
    pull = event.payload.pull_request
    return pull is not None and pull.head.ref.startswith(REQDRIVE_BRANCH_PREFIX)


def _by_bot(event: Event) -> bool:
    sender = event.payload.sender
    return sender is None or sender.is_bot


def pull_request_closed(event: Event, ctx: TriggerContext) -> list[Trigger]:
    """A reqdrive pull request closed or merged → its runs stop and their state goes."""
    pull = event.payload.pull_request
    if pull is None or not pull.head.ref.startswith(REQDRIVE_BRANCH_PREFIX):
        return []
    merged = bool(pull.merged)
    return [
        _request(
            event, JobKind.CLOSE, issue_number=pull.number, branch=pull.head.ref, merged=merged
        )
    ]


def installation_deleted(event: Event, ctx: TriggerContext) -> list[Trigger]:
    """The App uninstalled → drop that installation's tokens, runs and state."""
    installation = event.payload.installation
    if installation is None:
        return []
    return [_request(event, JobKind.UNINSTALL, requirement=f"INSTALLATION-{installation.id}")]


def _hand_off(event: Event) -> list[Trigger]:
    """A person (not a bot: see push) pushed to a reqdrive branch: its pull request is theirs
    now, and red CI on it starts no fix until `/reqdrive fix` asks again (bot/jobs/ci_fix.py)."""
    p = event.payload
    if p.sender is None or p.sender.is_bot or p.ref is None or p.after is None:
        return []
    branch = p.ref.removeprefix(BRANCH_REF_PREFIX)
    return [_request(event, JobKind.HANDOFF, branch=branch, head_sha=p.after)]


# CI conclusions that ask for a fix; "cancelled", "neutral", "skipped", "stale" and
# "action_required" are a person's or another App's business, not a failing check.
CI_FAILED = frozenset({"failure", "timed_out"})
ACTIONS_SLUG = "github-actions"


def ci_completed(event: Event, ctx: TriggerContext) -> list[Trigger]:
    """A check suite or workflow run that is not reqdrive's completed on the head of a
    reqdrive pull request → a ci_fix job: a failure asks for a fix, a success may end a
    chain of fixes ("CI is green"). Other conclusions, other branches, a commit that is no
    longer the PR's head (a newer push's CI will tell) start nothing."""
    p = event.payload
    result = p.check_suite if event.name == "check_suite" else p.workflow_run
    if result is None or result.conclusion not in CI_FAILED | {"success"}:
        return []
    app = result.app
    if app is not None and (app.id == ctx.app_id or (ctx.app_slug and app.slug == ctx.app_slug)):
        return []  # reqdrive's own check run: its verdict is the run's, not CI's
    if app is not None and app.slug == ACTIONS_SLUG:
        return []  # GitHub Actions: its workflow_run says the same, with the run's jobs
    pulls = [
        pull
        for pull in result.pull_requests
        if pull.head.ref.startswith(REQDRIVE_BRANCH_PREFIX) and pull.head.sha == result.head_sha
    ]
    ids = (
        {"check_suite_id": result.id}
        if event.name == "check_suite"
        else {"workflow_run_id": result.id}
    )
    return [
        _request(
            event,
            JobKind.CI_FIX,
            issue_number=pull.number,
            branch=pull.head.ref,
            head_sha=result.head_sha,
            conclusion=result.conclusion,
            **ids,
        )
        for pull in pulls
    ]


# (event, action) → rule. Every rule has the same shape and none depends on another.
RULES: dict[tuple[str, str | None], TriggerRule] = {
    ("issues", "labeled"): issue_labeled,
    ("push", None): push,
    ("issue_comment", "created"): comment_created,
    ("pull_request", "closed"): pull_request_closed,
    ("pull_request_review", "submitted"): review_submitted,
    ("pull_request_review_comment", "created"): review_comment_created,
    ("installation", "deleted"): installation_deleted,
    ("check_suite", "completed"): ci_completed,
    ("workflow_run", "completed"): ci_completed,
}
# installation events carry no repository: the installation itself is what they are about.
WITHOUT_REPOSITORY = frozenset({("installation", "deleted")})


def triggers_for(event: Event, ctx: TriggerContext) -> list[Trigger]:
    """Every job this delivery asks for; empty when reqdrive does not act on it."""
    rule = RULES.get((event.name, event.action))
    key = (event.name, event.action)
    if rule is None or (event.payload.repository is None and key not in WITHOUT_REPOSITORY):
        return []  # every job is about a repository; GitHub always sends one for these events
    return rule(event, ctx)


def _pushed_by_app(event: Event, ctx: TriggerContext) -> bool:
    sender = event.payload.sender
    if sender is None or sender.type != "Bot":
        return False
    # Without the slug we cannot tell our pushes from other Apps', so no Bot push triggers.
    return ctx.app_slug is None or sender.login == f"{ctx.app_slug}[bot]"


def _scan(event: Event, head_sha: str) -> RunRequest:
    # The scan job asks GitHub what the push changed and reads the config (bot/jobs/push_scan.py).
    return _request(
        event,
        JobKind.SCAN,
        requirement=f"PUSH-{head_sha}",
        head_sha=head_sha,
        base_sha=event.payload.before,
    )


def _request(event: Event, kind: JobKind, **fields: object) -> RunRequest:
    p = event.payload
    return RunRequest(
        kind=kind,
        delivery_id=event.delivery_id,
        repo=p.repository.full_name if p.repository else "",  # triggers_for checked it
        installation_id=p.installation.id if p.installation else None,
        sender=p.sender.login if p.sender else "",
        **fields,
    )
