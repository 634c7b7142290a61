"""Before a job works: who asked, with what permission, which requirement, under which config."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from bot.github.client import RepoClient
from bot.requests import RunRequest
from bot.stores.runs import RunRecord, RunRecords
from worker.exceptions import RepoConfigError
from worker.model.repo_config import CONFIG_PATHS, RepoConfig, parse_repo_config
from worker.model.requirement_files import is_requirement_file
from worker.model.slugs import slugify
from worker.run.spec import Requirement

# GitHub's repository roles, weakest first; a custom role counts as its base ("read").
ROLES = ("none", "read", "triage", "write", "maintain", "admin")
RUN_MARKER_RE = re.compile(r"<!-- reqdrive:run (?P<run_id>[A-Za-z0-9._-]+) -->")
BRANCH_PREFIX = "reqdrive/"


class Refusal(Exception):  # a job ends with this reply, on purpose
    """The job stops here and says why, in one comment (or on the commit, for a push)."""

    def __init__(self, message: str, *, check: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.check = check  # a check run conclusion to record too (a bad config)


@dataclass(frozen=True)
class RepoContext:
    """The repository as a job sees it: its base branch and its validated config."""

    config: RepoConfig
    base_branch: str
    default_branch: str


def is_bot(login: str) -> bool:
    """Bots (the App itself included) never drive reqdrive: no loops, no spending by robots."""
    return login.endswith("[bot]") or login == ""


def repo_context(client: RepoClient) -> RepoContext:
    """The config on the default branch; an invalid one refuses the job, naming the key."""
    default = client.read(lambda: client.repo.default_branch)
    for path in CONFIG_PATHS:
        text = client.file_text(path, default)
        if text is None:
            continue
        try:
            config = parse_repo_config(text, path)
        except RepoConfigError as error:
            raise Refusal(
                f"reqdrive cannot run: `{path}` is invalid: {error}. Fix the key named here "
                "on the default branch, then trigger the run again.",
                check="action_required",
            ) from None
        return RepoContext(config, config.base_branch or default, default)
    return RepoContext(RepoConfig(), default, default)


def check_permission(client: RepoClient, login: str, required: str) -> None:
    """The sender's role (collaborator-permission API, never `author_association`)."""
    role = client.role_of(login)
    rank = ROLES.index(role) if role in ROLES else ROLES.index("read")
    if rank < ROLES.index(required):
        raise Refusal(
            f"@{login}, reqdrive runs only for people with `{required}` access to this "
            f"repository (the `requiredPermission` in `.github/reqdrive.yml`); you have "
            f"`{role}`. Ask a maintainer to trigger it."
        )


def issue_requirement(client: RepoClient, number: int) -> Requirement:
    """A labelled issue (or `/reqdrive run` on it): its title and body are the requirement."""
    issue = client.read(lambda: client.repo.get_issue(number))
    title, body = issue.title or "", issue.body or ""
    if not (title + body).strip():
        raise Refusal("reqdrive cannot run: this issue has no title or text to build.")
    text = f"# {title.strip()}\n\n{body.strip()}\n"
    return Requirement(text=text, source=f"ISSUE-{number}", slug=slugify(f"issue-{number}-{title}"))


def file_requirement(client: RepoClient, path: str, sha: str, ctx: RepoContext) -> Requirement:
    """A pushed REQ file at the pushed commit; a file outside `requirementsDir` is no trigger."""
    name = path.rsplit("/", 1)[-1]
    if not is_requirement_file(path, ctx.config.requirements_dir):
        raise Refusal("", check=None)  # silent: pushes outside the configured folder are dropped
    text = client.file_text(path, sha)
    if text is None:
        raise Refusal("")  # removed again by a later push: nothing to build
    if not text.strip():
        raise Refusal(
            f"reqdrive did not run `{path}`: the file is empty. Write the requirement in it "
            "and push again."
        )
    stem = name.removesuffix(".md")
    return Requirement(text=text, source=path, slug=slugify(stem), repo_path=path)


def run_id_for(repo: str, requirement: Requirement) -> str:
    """Deterministic per repository, requirement and text: the same text resumes its run, a
    changed text is a new run (on the same branch, so the same PR)."""
    key = f"{repo.lower()}\n{requirement.source}\n{requirement.sha256}"
    return f"{requirement.slug[:60]}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


PULL_CLOSED = (
    "This pull request is {state}, so reqdrive does nothing more on it: its runs were stopped "
    "and their state removed."
)


def run_of_pull(client: RepoClient, records: RunRecords, number: int) -> RunRecord:
    """The run a pull request belongs to: its reqdrive/ branch and the run marker in its body,
    never free text from the comment."""
    pull = client.read(lambda: client.repo.get_pull(number))
    branch, body = pull.head.ref, pull.body or ""
    match = RUN_MARKER_RE.search(body)
    if not branch.startswith(BRANCH_PREFIX) or match is None:
        raise Refusal("This pull request was not opened by reqdrive, so there is no run to act on.")
    if pull.state == "closed":
        raise Refusal(PULL_CLOSED.format(state="merged" if pull.merged else "closed"))
    record = records.load(match["run_id"]) or records.for_branch(client.full_name, branch)
    if record is None or record.branch != branch:
        raise Refusal("reqdrive has no record of this pull request's run (it may have expired).")
    return record


def find_run(client: RepoClient, records: RunRecords, request: RunRequest) -> RunRecord:
    """The run a command on an issue or PR is about."""
    if request.requirement is None:
        if request.issue_number is None:
            raise Refusal("This command needs an issue or pull request.")
        return run_of_pull(client, records, request.issue_number)
    record = records.for_source(request.repo, request.requirement)
    if record is None:
        raise Refusal(
            "reqdrive has not run this requirement yet: add the trigger label or comment "
            "`/reqdrive run`."
        )
    return record
