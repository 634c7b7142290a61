"""Job arguments: the plain-JSON contract between the web intake and the worker."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class JobKind(StrEnum):
    """What a queued job asks the worker to do."""

    RUN = "run"  # plan (if needed) and implement a requirement
    RETRY = "retry"  # re-run one story, or every failed story
    PLAN = "plan"  # plan only, report the stories
    CANCEL = "cancel"
    STATUS = "status"
    HELP = "help"
    CLOSE = "close"  # a reqdrive pull request was closed or merged: stop its run
    UNINSTALL = "uninstall"  # the App was uninstalled: drop the installation's tokens and runs
    SCAN = "scan"  # a push whose payload may not list every file: ask GitHub what changed
    # CI that is not reqdrive's completed on a reqdrive PR's head: fix it if it failed
    CI_FIX = "ci_fix"
    HANDOFF = "handoff"  # a person pushed to a reqdrive branch: its PR is theirs now
    # A review on a reqdrive PR (changes requested, or the App mentioned), a line comment
    # mentioning the App, or `/reqdrive fix [text]`: its threads become FB- stories.
    FEEDBACK = "feedback"


class RunRequest(BaseModel):
    """One job's arguments. Never holds a token or an API object: RQ stores it as JSON."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: JobKind
    delivery_id: str
    repo: str  # "owner/name"
    installation_id: int | None = None
    sender: str
    # The requirement: "ISSUE-<n>" for an issue, or a path like docs/requirements/REQ-001-x.md.
    # None for a comment on a pull request: the job reads it from the PR's branch and marker.
    requirement: str | None = None
    issue_number: int | None = None  # the issue or pull request the trigger came from
    story_id: str | None = None  # "/reqdrive retry US-003"
    head_sha: str | None = None  # for a push: the commit the requirement file was read at
    base_sha: str | None = None  # for a scan: the commit the branch was at before the push
    comment_id: int | None = None
    branch: str | None = None  # a closed pull request's head branch
    merged: bool | None = None  # whether that pull request was merged (closed without, if not)
    # CI on a pull request's head (ci_fix): the workflow run or check suite that completed
    workflow_run_id: int | None = None
    check_suite_id: int | None = None
    conclusion: str | None = None
    # Feedback: the review submitted, or the line comment (a review comment: reactions to it
    # and replies in its thread take other endpoints than an issue comment's `comment_id`).
    review_id: int | None = None
    review_comment_id: int | None = None
