"""The one GitHub client: PyGithub with retries, rate-limit waits, write pacing and body limits."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import requests
from github import Auth, Github, GithubException
from github.CheckRun import CheckRun
from github.IssueComment import IssueComment
from github.PullRequest import PullRequest
from github.Reaction import Reaction
from github.Repository import Repository

from bot.github.auth import AppAuth
from bot.github.limits import fit_body, github_retry, rate_limit_wait, transient
from bot.stores.write_budget import WriteBudget

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_ATTEMPTS = 4
# The compare API lists at most 300 changed files (PyGithub's Comparison.files says so too);
# a comparison that reaches it may have left files out.
COMPARE_FILES_CAP = 300


class GitHubUnavailable(Exception):
    """GitHub kept failing (5xx, timeouts, rate limits) after every attempt."""


@dataclass(frozen=True)
class ClientSettings:
    """How the client talks to GitHub: base URL, timeout and pacing (from Settings)."""

    base_url: str = "https://api.github.com"
    timeout_s: float = 15.0
    seconds_between_requests: float = 0.25
    seconds_between_writes: float = 1.0


class RepoClient:
    """GitHub as reqdrive uses it for one repository, through one installation's token."""

    def __init__(
        self,
        gh: Github,
        repo: str,
        installation_id: int,
        *,
        budget: WriteBudget | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.gh = gh
        self.full_name = repo
        self.installation_id = installation_id
        self._budget = budget
        self._sleep = sleep
        self._repo: Repository | None = None
        self.writes = 0  # API writes this client made (bench/, tests)

    @property
    def repo(self) -> Repository:
        if self._repo is None:
            self._repo = self.read(lambda: self.gh.get_repo(self.full_name))
        return self._repo

    # the retry policy -------------------------------------------------------------------------

    def read(self, call: Callable[[], T]) -> T:
        """A read: repeated on rate limits and transient failures."""
        return self._call(call, write=False, find=None)

    def write(self, call: Callable[[], T], *, find: Callable[[], T | None] | None = None) -> T:
        """A write. If it timed out or got a 5xx it may still have happened: `find` looks for
        what it would have made, and only when nothing is found is it asked for again."""
        return self._call(call, write=True, find=find)

    def _call(
        self, call: Callable[[], T], *, write: bool, find: Callable[[], T | None] | None
    ) -> T:
        last: Exception | None = None
        for attempt in range(1, MAX_ATTEMPTS + 1):
            if write and self._budget is not None:
                self._budget.take(self.installation_id)
            try:
                result = call()
            except GithubException as error:
                wait = rate_limit_wait(error)
                if wait is None and not transient(error):
                    raise
                last = error
            except (requests.Timeout, requests.ConnectionError) as error:
                last, wait = error, None
            else:
                self.writes += write
                return result
            if wait is None:  # transient: did the write land after all?
                if write and find is not None:
                    found = self._found(find)
                    if found is not None:
                        self.writes += 1
                        return found
                wait = 0.5 * 2 ** (attempt - 1)
            log.warning(
                "github call failed; retrying",
                extra={
                    "repo": self.full_name,
                    "attempt": attempt,
                    "wait_s": wait,
                    "error": type(last).__name__,
                },
            )
            self._sleep(wait)
        raise GitHubUnavailable(f"GitHub did not answer after {MAX_ATTEMPTS} attempts: {last}")

    def _found(self, find: Callable[[], T | None]) -> T | None:
        try:
            return self.read(find)
        except GitHubUnavailable:
            return None

    # reads ------------------------------------------------------------------------------------

    def role_of(self, login: str) -> str:
        """The user's role on the repository (`role_name`: read, triage, write, maintain,
        admin, or a custom role's name); "none" for someone without access."""
        try:
            return self.read(lambda: self.repo.get_collaborator_role_name(login))
        except GithubException as error:
            if error.status == 404:  # not a collaborator, or not a user at all
                return "none"
            raise

    def file_text(self, path: str, ref: str) -> str | None:
        """A file's text at a commit or branch, None when there is no such file."""

        def get() -> str | None:
            try:
                content = self.repo.get_contents(path, ref=ref)
            except GithubException as error:
                if error.status == 404:
                    return None
                raise
            if isinstance(content, list):  # a folder
                return None
            return content.decoded_content.decode("utf-8", errors="replace")

        return self.read(get)

    def changed_files(self, base: str, head: str) -> list[tuple[str, str]] | None:
        """(path, status) of every file `base...head` changed; None when GitHub's comparison
        stops at its 300 files and so may leave some out."""

        def compare() -> list[tuple[str, str]]:
            return [(f.filename, f.status) for f in self.repo.compare(base, head).files]

        files = self.read(compare)
        return None if len(files) >= COMPARE_FILES_CAP else files

    def folder_shas(self, folder: str, ref: str) -> dict[str, str]:
        """path → blob sha of the files directly in `folder` at `ref`; {} when it is absent."""

        def listing() -> dict[str, str]:
            try:
                entries = self.repo.get_contents(folder, ref=ref)
            except GithubException as error:
                if error.status == 404:
                    return {}
                raise
            if not isinstance(entries, list):  # a file of that name
                return {}
            return {e.path: e.sha for e in entries if e.type == "file"}

        return self.read(listing)

    def branch_sha(self, branch: str) -> str:
        return self.read(lambda: self.repo.get_branch(branch).commit.sha)

    def find_comment(self, number: int, marker: str) -> IssueComment | None:
        """The comment on an issue or PR that carries `marker`, if any."""

        def scan() -> IssueComment | None:
            for comment in self.repo.get_issue(number).get_comments():
                if marker in (comment.body or ""):
                    return comment
            return None

        return self.read(scan)

    def find_pull(self, branch: str) -> PullRequest | None:
        """The open pull request whose head is `branch` in this repository."""
        owner = self.full_name.split("/", 1)[0]

        def scan() -> PullRequest | None:
            for pull in self.repo.get_pulls(state="open", head=f"{owner}:{branch}"):
                return pull
            return None

        return self.read(scan)

    def find_check_run(self, sha: str, external_id: str) -> CheckRun | None:
        def scan() -> CheckRun | None:
            for run in self.repo.get_commit(sha).get_check_runs(check_name=CHECK_NAME):
                if run.external_id == external_id:
                    return run
            return None

        return self.read(scan)

    # writes -----------------------------------------------------------------------------------

    def react(self, number: int, comment_id: int | None, content: str = "eyes") -> None:
        """A reaction on the comment, or on the issue itself; GitHub answers an existing one
        with 200, so repeating it is harmless."""

        def create() -> Reaction:
            issue = self.repo.get_issue(number)
            on = issue if comment_id is None else issue.get_comment(comment_id)
            return on.create_reaction(content)

        self.write(create)

    def upsert_comment(
        self, number: int, marker: str, body: str, *, known_id: int | None = None
    ) -> int:
        """Edit the comment carrying `marker` (created if there is none); its id."""
        text = fit_body(body, "in the run folder on the worker")
        comment_id = known_id
        if comment_id is None:
            found = self.find_comment(number, marker)
            comment_id = found.id if found else None
        if comment_id is not None:
            cid = comment_id
            self.write(lambda: self.repo.get_issue(number).get_comment(cid).edit(text))
            return cid
        created = self.write(
            lambda: self.repo.get_issue(number).create_comment(text),
            find=lambda: self.find_comment(number, marker),
        )
        return int(created.id)

    def reply(self, number: int, body: str, *, marker: str) -> int:
        """One reply on an issue or PR; `marker` makes a repeated call find it, not repost."""
        return self.upsert_comment(number, marker, f"{body}\n\n{marker}\n")

    def commit_comment(self, sha: str, body: str) -> None:
        self.write(lambda: self.repo.get_commit(sha).create_comment(fit_body(body, "omitted")))

    def open_pull(
        self, *, branch: str, base: str, title: str, body: str, draft: bool
    ) -> PullRequest:
        """Open a pull request for `branch`, or find the one already open for it."""
        text = fit_body(body, "in the run folder on the worker (pr.md)")

        def create() -> PullRequest:
            try:
                return self.repo.create_pull(
                    base=base, head=branch, title=title, body=text, draft=draft
                )
            except GithubException as error:
                if error.status == 422 and "already exists" in str(error.data):
                    existing = self.find_pull(branch)
                    if existing is not None:
                        return existing
                raise

        return self.write(create, find=lambda: self.find_pull(branch))

    def edit_pull(self, pull: PullRequest, *, title: str, body: str) -> None:
        text = fit_body(body, "in the run folder on the worker (pr.md)")
        self.write(lambda: pull.edit(title=title, body=text))

    def add_labels(self, pull: PullRequest, labels: Iterable[str]) -> None:
        names = list(labels)
        if not names:
            return
        # PullRequest.add_to_labels sends a bare JSON array; GitHub's description documents
        # the {"labels": [...]} object, so the request is made as documented.
        url = f"/repos/{self.full_name}/issues/{pull.number}/labels"
        self.write(
            lambda: self.gh.requester.requestJsonAndCheck("POST", url, input={"labels": names})
        )

    def set_draft(self, pull: PullRequest, draft: bool) -> None:
        """Draft ↔ ready, which only GraphQL can change (`<base>/graphql`)."""
        if pull.draft == draft:
            return
        if draft:
            self.write(pull.convert_to_draft)
        else:
            self.write(pull.mark_ready_for_review)

    def create_check_run(
        self,
        *,
        sha: str,
        external_id: str,
        status: str,
        output: Mapping[str, Any],
        conclusion: str | None = None,
    ) -> CheckRun:
        fields = _check_fields(status, output, conclusion)
        return self.write(
            lambda: self.repo.create_check_run(
                name=CHECK_NAME, head_sha=sha, external_id=external_id, **fields
            ),
            find=lambda: self.find_check_run(sha, external_id),
        )

    def update_check_run(
        self,
        check_run_id: int,
        *,
        status: str,
        output: Mapping[str, Any],
        conclusion: str | None = None,
    ) -> None:
        fields = _check_fields(status, output, conclusion)

        def edit() -> None:
            self.repo.get_check_run(check_run_id).edit(**fields)

        self.write(edit)


CHECK_NAME = "reqdrive"


def _check_fields(status: str, output: Mapping[str, Any], conclusion: str | None) -> dict[str, Any]:
    """A check run's status, output (its texts cut to GitHub's limit) and any conclusion."""
    fitted = dict(output)
    for key in ("summary", "text"):
        if key in fitted:
            fitted[key] = fit_body(str(fitted[key]), "in the progress comment and the run folder")
    fields: dict[str, Any] = {"status": status, "output": fitted}
    if conclusion is not None:
        fields["conclusion"] = conclusion
    return fields


class GitHubApp:
    """Makes RepoClients: one installation's token for one repository, one PyGithub client."""

    def __init__(
        self,
        auth: AppAuth,
        settings: ClientSettings,
        *,
        budget: WriteBudget | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.auth = auth
        self.settings = settings
        self._budget = budget
        self._sleep = sleep

    def client(self, installation_id: int, repo: str, permissions: Mapping[str, str]) -> RepoClient:
        token = self.auth.token(installation_id, repo, permissions)
        gh = Github(
            auth=Auth.Token(token),
            base_url=self.settings.base_url,
            timeout=int(max(self.settings.timeout_s, 1)),
            retry=github_retry(),
            lazy=True,  # objects are built from URLs; only what is read is fetched
            seconds_between_requests=self.settings.seconds_between_requests or None,
            seconds_between_writes=self.settings.seconds_between_writes or None,
        )
        return RepoClient(gh, repo, installation_id, budget=self._budget, sleep=self._sleep)
