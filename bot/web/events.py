"""A verified webhook delivery: its headers and the payload fields reqdrive reads."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

# Payload models ignore every field reqdrive does not read, so GitHub adding fields never
# turns a delivery into a 400; the fields kept are required by GitHub's own schemas.
_PAYLOAD_CONFIG = ConfigDict(extra="ignore", frozen=True)


# What a signed payload may put into a job, and through it into Redis keys, branch names,
# API paths and log lines. The limits are GitHub's own: an owner is 1-39 letters, digits or
# hyphens, a repository name 1-100 of letters, digits, ".", "_" or "-" (never "." or "..");
# issue and comment numbers are positive. A value outside them is not GitHub's, whoever
# signed it, and the delivery is answered 400 naming the field instead of becoming a job.
def _not_a_dot_name(full_name: str) -> str:
    if full_name.rpartition("/")[2] in {".", ".."}:
        raise ValueError("'.' and '..' are not repository names")
    return full_name


FullName = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}$"),
    AfterValidator(_not_a_dot_name),
]
Login = Annotated[str, StringConstraints(min_length=1, max_length=100)]
Number = Annotated[int, Field(ge=1, le=2**31 - 1)]  # issue and pull request numbers
Id = Annotated[int, Field(ge=1, le=2**53)]  # database ids: JSON-safe integers
Text = Annotated[str, StringConstraints(max_length=262_144)]  # GitHub caps comments at 65,536
Name = Annotated[str, StringConstraints(max_length=1024)]  # a label, a ref, a branch, a path
Sha = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")]


class User(BaseModel):
    model_config = _PAYLOAD_CONFIG

    login: Login
    type: Name = "User"

    @property
    def is_bot(self) -> bool:
        # Apps post as type "Bot"; their login also ends in "[bot]" (belt and braces).
        return self.type == "Bot" or self.login.endswith("[bot]")


class Repository(BaseModel):
    model_config = _PAYLOAD_CONFIG

    full_name: FullName
    default_branch: Name | None = None


class Installation(BaseModel):
    model_config = _PAYLOAD_CONFIG

    id: Id


class Label(BaseModel):
    model_config = _PAYLOAD_CONFIG

    name: Name


class Issue(BaseModel):
    model_config = _PAYLOAD_CONFIG

    number: Number
    # Present only when the "issue" is a pull request (comments on PRs arrive as issue_comment).
    pull_request: dict[str, object] | None = None

    @property
    def is_pull_request(self) -> bool:
        return self.pull_request is not None


class BranchRef(BaseModel):
    model_config = _PAYLOAD_CONFIG

    ref: Name


class PullRequest(BaseModel):
    model_config = _PAYLOAD_CONFIG

    number: Number
    head: BranchRef
    merged: bool | None = None


class PullHead(BaseModel):
    model_config = _PAYLOAD_CONFIG

    ref: Name
    sha: Sha


class PullRef(BaseModel):
    """A pull request as check_suite and workflow_run name it: number and head only."""

    model_config = _PAYLOAD_CONFIG

    number: Number
    head: PullHead


class App(BaseModel):
    model_config = _PAYLOAD_CONFIG

    id: Id
    slug: Name | None = None  # GitHub sends it; octokit's older examples leave it out


class CiResult(BaseModel):
    """What check_suite.completed and workflow_run.completed say alike: which commit, how it
    ended, and the pull requests whose head it is (empty for a fork's)."""

    model_config = _PAYLOAD_CONFIG

    id: Id
    head_sha: Sha
    head_branch: Name | None = None
    conclusion: Name | None = None
    pull_requests: list[PullRef] = Field(default_factory=list)
    app: App | None = None  # a check suite's App (reqdrive's own is never judged here)


class Comment(BaseModel):
    model_config = _PAYLOAD_CONFIG

    id: Id
    body: Text
    user: User
    in_reply_to_id: Id | None = None  # a line comment answering in an existing thread


class Review(BaseModel):
    model_config = _PAYLOAD_CONFIG

    id: Id
    body: Text | None = None  # null when the reviewer wrote only line comments, or nothing
    state: Name  # "approved", "changes_requested", "commented" (webhooks spell it lower case)
    user: User


class Commit(BaseModel):
    model_config = _PAYLOAD_CONFIG

    added: list[Name] = Field(default_factory=list)
    modified: list[Name] = Field(default_factory=list)
    removed: list[Name] = Field(default_factory=list)


class Payload(BaseModel):
    """The union of payload fields read by any trigger; absent ones stay None."""

    model_config = _PAYLOAD_CONFIG

    action: str | None = None
    sender: User | None = None
    repository: Repository | None = None
    installation: Installation | None = None
    label: Label | None = None
    issue: Issue | None = None
    pull_request: PullRequest | None = None
    comment: Comment | None = None
    review: Review | None = None  # pull_request_review
    # push
    ref: Name | None = None
    before: Sha | None = None
    after: Sha | None = None
    deleted: bool = False
    commits: list[Commit] = Field(default_factory=list)
    # check_suite and workflow_run (Red CI)
    check_suite: CiResult | None = None
    workflow_run: CiResult | None = None


class Event(BaseModel):
    """One delivery: event name and delivery id from the headers, plus its payload."""

    model_config = ConfigDict(frozen=True)

    name: Name
    delivery_id: str
    payload: Payload

    @property
    def action(self) -> str | None:
        return self.payload.action
