"""A verified webhook delivery: its headers and the payload fields reqdrive reads."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# Payload models ignore every field reqdrive does not read, so GitHub adding fields never
# turns a delivery into a 400; the fields kept are required by GitHub's own schemas.
_PAYLOAD_CONFIG = ConfigDict(extra="ignore", frozen=True)


class User(BaseModel):
    model_config = _PAYLOAD_CONFIG

    login: str
    type: str = "User"

    @property
    def is_bot(self) -> bool:
        # Apps post as type "Bot"; their login also ends in "[bot]" (belt and braces).
        return self.type == "Bot" or self.login.endswith("[bot]")


class Repository(BaseModel):
    model_config = _PAYLOAD_CONFIG

    full_name: str
    default_branch: str | None = None


class Installation(BaseModel):
    model_config = _PAYLOAD_CONFIG

    id: int


class Label(BaseModel):
    model_config = _PAYLOAD_CONFIG

    name: str


class Issue(BaseModel):
    model_config = _PAYLOAD_CONFIG

    number: int
    # Present only when the "issue" is a pull request (comments on PRs arrive as issue_comment).
    pull_request: dict[str, object] | None = None

    @property
    def is_pull_request(self) -> bool:
        return self.pull_request is not None


class Comment(BaseModel):
    model_config = _PAYLOAD_CONFIG

    id: int
    body: str
    user: User


class Commit(BaseModel):
    model_config = _PAYLOAD_CONFIG

    added: list[str] = Field(default_factory=list)
    modified: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)


class Payload(BaseModel):
    """The union of payload fields read by any trigger; absent ones stay None."""

    model_config = _PAYLOAD_CONFIG

    action: str | None = None
    sender: User | None = None
    repository: Repository | None = None
    installation: Installation | None = None
    label: Label | None = None
    issue: Issue | None = None
    comment: Comment | None = None
    # push
    ref: str | None = None
    after: str | None = None
    deleted: bool = False
    commits: list[Commit] = Field(default_factory=list)


class Event(BaseModel):
    """One delivery: event name and delivery id from the headers, plus its payload."""

    model_config = ConfigDict(frozen=True)

    name: str
    delivery_id: str
    payload: Payload

    @property
    def action(self) -> str | None:
        return self.payload.action
