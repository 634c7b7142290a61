"""GitHub's REST and GraphQL API stood in by `responses`: a small stateful fake, every call checked.

Every test that lets PyGithub talk to "GitHub" goes through `FakeGitHub` (the `fake_github`
fixture): it answers the operations reqdrive calls from in-memory state, can be told to fail
(502, 403 with retry-after, a timeout after the write landed), and checks every request it saw
against GitHub's OpenAPI description when the test ends.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import requests
import responses
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.github_api import check_request

API = "https://ghe.test/api/v3"  # an Enterprise-style base: GraphQL lives at /api/graphql
GRAPHQL = "https://ghe.test/api/graphql"
APP_LOGIN = "reqdrive[bot]"

# What a request gets: status, headers and JSON text, or for a timeout fault the exception
# `responses` raises to the client (the served fake answers it with a 504 instead).
Answer = tuple[int, dict[str, str], str] | requests.ReadTimeout
Handler = Callable[["FakeGitHub", re.Match[str], dict[str, Any], dict[str, list[str]]], Any]


@cache
def private_key_pem() -> str:
    """A throwaway RSA key for the App's JWT (made once per test session)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


@dataclass
class Fault:
    """Answer the next `times` matching calls with `status` (and `headers`); with `land`, the
    write happens first (a timeout or 5xx after GitHub acted)."""

    method: str
    path_re: re.Pattern[str]
    status: int | None  # None: a read timeout
    times: int = 1
    headers: dict[str, str] = field(default_factory=dict)
    land: bool = False
    body: dict[str, Any] = field(default_factory=lambda: {"message": "Server Error"})


@dataclass
class Call:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    status: int | None
    at: float = field(default_factory=time.time)  # when it arrived (bench/)


class FakeGitHub:
    """In-memory GitHub for one or more repositories, behind `responses`."""

    def __init__(self, rsps: responses.RequestsMock | None, api: str = API) -> None:
        self.rsps = rsps
        self.api = api
        self.ids = itertools.count(1000)
        self.repos: dict[str, dict[str, Any]] = {}
        self.files: dict[tuple[str, str, str], str] = {}  # (repo, ref, path) → text
        self.roles: dict[tuple[str, str], str] = {}
        self.issues: dict[tuple[str, int], dict[str, Any]] = {}
        self.comments: dict[int, dict[str, Any]] = {}
        self.reactions: list[dict[str, Any]] = []
        self.pulls: dict[tuple[str, int], dict[str, Any]] = {}
        self.check_runs: dict[int, dict[str, Any]] = {}
        self.commit_comments: list[dict[str, Any]] = []
        self.tokens: list[dict[str, Any]] = []
        self.branch_heads: dict[tuple[str, str], str] = {}
        # (repo, base, head) → [(path, status)] that the compare API answers
        self.comparisons: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
        # Reviews, review threads and their comments (tests/support/github_reviews.py).
        self.reviews: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.threads: dict[str, dict[str, Any]] = {}
        self.review_comments: dict[int, tuple[str, dict[str, Any]]] = {}
        self.calls: list[Call] = []
        self.faults: list[Fault] = []
        self.numbers = itertools.count(1)
        if rsps:
            for method in ("GET", "POST", "PATCH", "PUT", "DELETE"):
                rsps.add_callback(
                    method, re.compile(r"https://ghe\.test(:443)?/.*"), callback=self._answer
                )

    # setting the scene ------------------------------------------------------------------------

    def add_repo(self, full_name: str, clone_url: str, *, default_branch: str = "main") -> None:
        owner, name = full_name.split("/")
        self.repos[full_name] = {
            "id": next(self.ids),
            "node_id": "R_1",
            "name": name,
            "full_name": full_name,
            "private": False,
            "owner": self._user(owner, "Organization"),
            "url": f"{self.api}/repos/{full_name}",
            "html_url": f"{self.web}/{full_name}",
            "clone_url": clone_url,
            "default_branch": default_branch,
        }

    def add_issue(self, repo: str, title: str, body: str, *, user: str = "alice") -> int:
        number = next(self.numbers)
        self.issues[(repo, number)] = {
            "id": next(self.ids),
            "node_id": f"I_{number}",
            "number": number,
            "title": title,
            "body": body,
            "state": "open",
            "user": self._user(user),
            "labels": [],
            "url": f"{self.api}/repos/{repo}/issues/{number}",
            "html_url": f"{self.web}/{repo}/issues/{number}",
        }
        return number

    def set_role(self, repo: str, user: str, role: str) -> None:
        self.roles[(repo, user)] = role

    def set_file(self, repo: str, ref: str, path: str, text: str) -> None:
        self.files[(repo, ref, path)] = text

    def file_at(self, repo: str, ref: str, path: str) -> str | None:
        """A file's text at a branch or commit, as the contents API serves it (None: 404)."""
        return self.files.get((repo, ref, path))

    def fail(self, method: str, path: str, status: int | None, **fields: Any) -> None:
        """The next matching calls fail; `path` is a regex over the URL path."""
        self.faults.append(Fault(method, re.compile(path), status, **fields))

    # what happened ----------------------------------------------------------------------------

    def writes(self) -> list[Call]:
        return [c for c in self.calls if c.method != "GET" and "access_tokens" not in c.path]

    def comments_on(self, repo: str, number: int) -> list[dict[str, Any]]:
        return [c for c in self.comments.values() if c["_issue"] == (repo, number)]

    def pulls_of(self, repo: str) -> list[dict[str, Any]]:
        return [p for (r, _), p in self.pulls.items() if r == repo]

    def check_runs_of(self, repo: str) -> list[dict[str, Any]]:
        return [c for c in self.check_runs.values() if c["_repo"] == repo]

    # the HTTP side ----------------------------------------------------------------------------

    def _answer(self, request: requests.PreparedRequest) -> Answer:
        return self.handle(request.method or "GET", request.url or "", request.body)

    def handle(self, method: str, full_url: str, raw: bytes | str | None) -> Answer:
        """One request's answer: status, headers, JSON text (a timeout fault: an exception)."""
        url = urlsplit(full_url)
        path, query = unquote(url.path), parse_qs(url.query)
        if path.startswith(github_ci.LOG_DOWNLOADS):  # not the API: a signed download
            return github_ci.download(self, path)
        body = json.loads(raw) if raw else None
        fault = self._fault(method, path)
        if fault is not None and not fault.land:
            return self._faulted(method, path, query, body, fault)
        status, payload = self._route(method, path, body, query)
        if fault is not None:
            return self._faulted(method, path, query, body, fault)
        self.calls.append(Call(method, path, query, body, status))
        if isinstance(payload, github_ci.Redirect):
            return status, {"Location": payload.location}, ""
        return status, {"Content-Type": "application/json"}, json.dumps(payload)

    def _fault(self, method: str, path: str) -> Fault | None:
        for fault in self.faults:
            if fault.times > 0 and fault.method == method and fault.path_re.search(path):
                fault.times -= 1
                return fault
        return None

    def _faulted(
        self, method: str, path: str, query: dict[str, list[str]], body: Any, fault: Fault
    ) -> Answer:
        self.calls.append(Call(method, path, query, body, fault.status))
        if fault.status is None:
            return requests.ReadTimeout("read timed out (fake)")
        headers = {"Content-Type": "application/json", **fault.headers}
        return fault.status, headers, json.dumps(fault.body)

    def _route(
        self, method: str, path: str, body: Any, query: dict[str, list[str]]
    ) -> tuple[int, Any]:
        if path == "/api/graphql":
            return self._graphql(body)
        rel = path.removeprefix("/api/v3")
        for (verb, pattern), handler in ROUTES.items():
            match = pattern.fullmatch(rel)
            if verb == method and match:
                result = handler(self, match, body or {}, query)
                return result if isinstance(result, tuple) else (200, result)
        return 404, {"message": "Not Found", "documentation_url": "fake"}

    # state helpers ----------------------------------------------------------------------------

    @property
    def web(self) -> str:
        return self.api.split("/api/")[0]

    def _user(self, login: str, kind: str = "User") -> dict[str, Any]:
        return {
            "login": login,
            "id": abs(hash(login)) % 10**6,
            "type": kind,
            "url": f"{self.api}/users/{login}",
        }

    def _graphql(self, body: dict[str, Any]) -> tuple[int, Any]:
        query = body["query"]
        if github_reviews.answers(query):
            return github_reviews.graphql(self, body)
        node = body["variables"]["input"]["pullRequestId"]
        pull = next(p for p in self.pulls.values() if p["node_id"] == node)
        name = re.search(r"(markPullRequestReadyForReview|convertPullRequestToDraft)", query)
        assert name is not None, query
        pull["draft"] = name.group(1) == "convertPullRequestToDraft"
        return 200, {
            "data": {
                name.group(1): {"clientMutationId": None, "pullRequest": {"isDraft": pull["draft"]}}
            }
        }


def _route(method: str, pattern: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        ROUTES[(method, re.compile(pattern))] = handler
        return handler

    return register


ROUTES: dict[tuple[str, re.Pattern[str]], Handler] = {}
REPO = r"/repos/(?P<repo>[^/]+/[^/]+)"


@_route("POST", r"/app/installations/(?P<id>\d+)/access_tokens")
def _token(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    token = f"ghs_fake{next(gh.ids)}token"
    expires = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    gh.tokens.append({"installation_id": int(m["id"]), "token": token, **body})
    return 201, {
        "token": token,
        "expires_at": expires,
        "permissions": body.get("permissions"),
        "repository_selection": "selected",
    }


@_route("GET", REPO)
def _repo(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    return gh.repos.get(m["repo"]) or (404, {"message": "Not Found"})


@_route("GET", REPO + r"/branches/(?P<branch>.+)")
def _branch(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    sha = gh.branch_heads.get((m["repo"], m["branch"]))
    if sha is None:
        return 404, {"message": "Branch not found"}
    return {"name": m["branch"], "protected": False, "commit": {"sha": sha, "url": ""}}


@_route("GET", REPO + r"/collaborators/(?P<user>[^/]+)/permission")
def _permission(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    role = gh.roles.get((m["repo"], m["user"]))
    if role is None:
        return 404, {"message": "Not Found"}
    permission = {"maintain": "write", "triage": "read"}.get(role, role)
    return {"permission": permission, "role_name": role, "user": gh._user(m["user"])}


@_route("GET", REPO + r"/contents/(?P<path>.+)")
def _contents(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    ref = q.get("ref", ["main"])[0]
    text = gh.file_at(m["repo"], ref, m["path"])
    folder = m["path"].rstrip("/") + "/"
    listed = [
        (path, text) for (repo, at, path), text in sorted(gh.files.items())
        if repo == m["repo"] and at == ref and path.startswith(folder)
        and "/" not in path[len(folder):]
    ]  # fmt: skip
    if text is None and listed:  # a folder: its files, each with its blob's sha
        return [_content_entry(gh, m["repo"], path, text) for path, text in listed]
    if text is None:
        return 404, {"message": "Not Found"}
    return {
        "type": "file",
        "encoding": "base64",
        "size": len(text),
        "name": m["path"],
        "path": m["path"],
        "sha": "0" * 40,
        "url": f"{gh.api}/repos/{m['repo']}/contents",
        "content": base64.b64encode(text.encode()).decode(),
    }


def _content_entry(gh: FakeGitHub, repo: str, path: str, text: str) -> dict[str, Any]:
    sha = hashlib.sha1(f"blob {len(text.encode())}\0{text}".encode()).hexdigest()  # noqa: S324
    url = f"{gh.api}/repos/{repo}/contents/{path}"
    return {
        "type": "file", "size": len(text.encode()), "name": path.rsplit("/", 1)[-1],
        "path": path, "sha": sha, "url": url, "git_url": None, "html_url": None,
        "download_url": None, "_links": {"self": url, "git": None, "html": None},
    }  # fmt: skip


@_route("GET", REPO + r"/compare/(?P<base>[^.]+)\.\.\.(?P<head>.+)")
def _compare(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    files = gh.comparisons.get((m["repo"], m["base"], m["head"]))
    if files is None:
        return 404, {"message": "Not Found"}
    return {
        "url": "", "html_url": "", "permalink_url": "", "diff_url": "", "patch_url": "",
        "base_commit": {}, "merge_base_commit": {}, "status": "ahead", "ahead_by": 1,
        "behind_by": 0, "total_commits": 1, "commits": [],
        "files": [
            {"sha": "0" * 40, "filename": path, "status": status, "additions": 1,
             "deletions": 0, "changes": 1, "blob_url": "", "raw_url": "", "contents_url": ""}
            for path, status in files
        ][:300],  # GitHub's own cap
    }  # fmt: skip


@_route("GET", REPO + r"/issues/(?P<n>\d+)")
def _issue(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    return gh.issues.get((m["repo"], int(m["n"]))) or (404, {"message": "Not Found"})


@_route("GET", REPO + r"/issues/(?P<n>\d+)/comments")
def _comments(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    return [_public(c) for c in gh.comments_on(m["repo"], int(m["n"]))]


@_route("POST", REPO + r"/issues/(?P<n>\d+)/comments")
def _comment(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    cid = next(gh.ids)
    comment = {
        "id": cid,
        "node_id": f"IC_{cid}",
        "body": body["body"],
        "user": gh._user(APP_LOGIN, "Bot"),
        "_issue": (m["repo"], int(m["n"])),
        "url": f"{gh.api}/repos/{m['repo']}/issues/comments/{cid}",
        "html_url": f"{gh.web}/{m['repo']}/issues/{m['n']}#issuecomment-{cid}",
    }
    gh.comments[cid] = comment
    return 201, _public(comment)


@_route("PATCH", REPO + r"/issues/comments/(?P<id>\d+)")
def _edit_comment(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    comment = gh.comments[int(m["id"])]
    comment["body"] = body["body"]
    return _public(comment)


@_route("POST", REPO + r"/issues/(?P<n>\d+)/reactions")
def _issue_reaction(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    gh.reactions.append({"issue": int(m["n"]), "content": body["content"]})
    return 201, {"id": next(gh.ids), "content": body["content"], "user": gh._user(APP_LOGIN)}


@_route("POST", REPO + r"/issues/comments/(?P<id>\d+)/reactions")
def _comment_reaction(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    gh.reactions.append({"comment": int(m["id"]), "content": body["content"]})
    return 201, {"id": next(gh.ids), "content": body["content"], "user": gh._user(APP_LOGIN)}


@_route("GET", REPO + r"/pulls")
def _pulls(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    head = q.get("head", [""])[0].split(":", 1)[-1]
    state = q.get("state", ["open"])[0]
    return [
        p
        for p in gh.pulls_of(m["repo"])
        if (not head or p["head"]["ref"] == head) and state in ("all", p["state"])
    ]


@_route("POST", REPO + r"/pulls")
def _create_pull(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    repo = m["repo"]
    if any(p["head"]["ref"] == body["head"] and p["state"] == "open" for p in gh.pulls_of(repo)):
        return 422, {
            "message": "Validation Failed",
            "errors": [
                {
                    "resource": "PullRequest",
                    "code": "custom",
                    "message": f"A pull request already exists for "
                    f"{repo.split('/')[0]}:{body['head']}.",
                }
            ],
        }
    number = next(gh.numbers)
    pull = {
        "id": next(gh.ids),
        "node_id": f"PR_{number}",
        "number": number,
        "title": body["title"],
        "body": body.get("body"),
        "draft": body.get("draft", False),
        "state": "open",
        "merged": False,
        "labels": [],
        # GitHub's head sha is the branch's; a fake that knows no branch heads says zeros.
        "head": {
            "ref": body["head"],
            "sha": gh.branch_heads.get((repo, body["head"]), "0" * 40),
            "label": body["head"],
        },
        "base": {"ref": body["base"], "sha": "0" * 40, "label": body["base"]},
        "user": gh._user(APP_LOGIN, "Bot"),
        "url": f"{gh.api}/repos/{repo}/pulls/{number}",
        "issue_url": f"{gh.api}/repos/{repo}/issues/{number}",
        "html_url": f"{gh.web}/{repo}/pull/{number}",
    }
    gh.pulls[(repo, number)] = pull
    gh.issues[(repo, number)] = {**pull, "pull_request": {"url": pull["url"]}}
    return 201, pull


@_route("GET", REPO + r"/pulls/(?P<n>\d+)")
def _pull(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    pull = gh.pulls.get((m["repo"], int(m["n"])))
    if pull is None:
        return 404, {"message": "Not Found"}
    # GitHub's head sha is the branch's as it is now: the runs push to the local remote
    # directly, so the fake asks it (a feedback run builds on the head the PR reports).
    head = _remote_head(gh, m["repo"], pull["head"]["ref"])
    if head:
        pull["head"]["sha"] = head
    return pull


def _remote_head(gh: FakeGitHub, repo: str, branch: str) -> str | None:
    remote = str(gh.repos.get(repo, {}).get("clone_url") or "")
    if not remote.startswith("/"):
        return None
    found = subprocess.run(
        ["git", "rev-parse", "--verify", "-q", f"refs/heads/{branch}"],
        cwd=remote, capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip
    return found.stdout.strip() or None


@_route("PATCH", REPO + r"/pulls/(?P<n>\d+)")
def _edit_pull(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    pull = gh.pulls[(m["repo"], int(m["n"]))]
    pull.update({k: v for k, v in body.items() if k in ("title", "body", "state")})
    return pull


@_route("POST", REPO + r"/issues/(?P<n>\d+)/labels")
def _labels(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    target = gh.pulls.get((m["repo"], int(m["n"]))) or gh.issues[(m["repo"], int(m["n"]))]
    names = body["labels"] if isinstance(body, dict) else body
    for name in names:
        if name not in [label["name"] for label in target["labels"]]:
            target["labels"].append({"name": name, "id": next(gh.ids)})
    return target["labels"]


@_route("POST", REPO + r"/check-runs")
def _create_check(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    cid = next(gh.ids)
    run = {
        "id": cid,
        "_repo": m["repo"],
        "url": f"{gh.api}/repos/{m['repo']}/check-runs/{cid}",
        "conclusion": None,
        "_annotations": [],
        **body,
    }
    gh.check_runs[cid] = run
    _annotate(run, body)
    return 201, _public(run)


@_route("PATCH", REPO + r"/check-runs/(?P<id>\d+)")
def _edit_check(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    run = gh.check_runs[int(m["id"])]
    run.update(body)
    _annotate(run, body)
    return _public(run)


def _annotate(run: dict[str, Any], body: dict[str, Any]) -> None:
    # GitHub appends each request's annotations to the check run's; the rest of `output` is
    # replaced. Tests read what a person would see in run["_annotations"].
    run["_annotations"] += (body.get("output") or {}).get("annotations", [])


@_route("GET", REPO + r"/commits/(?P<sha>[0-9a-f]+)/check-runs")
def _checks_of(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    runs = [_public(r) for r in gh.check_runs_of(m["repo"]) if r["head_sha"] == m["sha"]]
    return {"total_count": len(runs), "check_runs": runs}


@_route("POST", REPO + r"/commits/(?P<sha>[0-9a-f]+)/comments")
def _commit_comment(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    comment = {"id": next(gh.ids), "commit_id": m["sha"], "body": body["body"]}
    gh.commit_comments.append(comment)
    return 201, comment


# Reviews and review threads register their routes and answer their GraphQL operations there
# (imported last: it builds on this module's ROUTES and FakeGitHub).
from tests.support import github_reviews  # noqa: E402


def _public(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if not k.startswith("_")}


def check_calls(calls: list[Call]) -> None:
    """Every request the App sent, checked against GitHub's OpenAPI description."""
    for call in calls:
        query = "&".join(f"{k}={v}" for k, vs in call.query.items() for v in vs)
        url = f"https://ghe.test{call.path}" + (f"?{query}" if query else "")
        check_request(call.method, url, call.body)


def fake_github_context() -> Iterator[FakeGitHub]:
    """The fake behind `responses`, for the `fake_github` fixture."""
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        fake = FakeGitHub(rsps)
        yield fake
        check_calls(fake.calls)


@contextmanager
def served_fake_github() -> Iterator[FakeGitHub]:
    """The same fake as a real HTTP server on 127.0.0.1, for other processes (real RQ
    workers, the bench); every request checked against the OpenAPI description at the end."""
    holder: list[FakeGitHub] = []

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else None
            url = f"{holder[0].web}{self.path}"
            with lock:
                answer = holder[0].handle(self.command, url, raw)
            if isinstance(answer, Exception):  # a timeout fault: answer nothing useful
                answer = (504, {"Content-Type": "application/json"}, '{"message": "timeout"}')
            status, headers, text = answer
            data = text.encode()
            self.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(data))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    lock = threading.Lock()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake = FakeGitHub(None, api=f"http://127.0.0.1:{server.server_address[1]}/api/v3")
    holder.append(fake)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
    check_calls(fake.calls)


# CI's routes (workflow runs, jobs, logs, check suites, annotations) register themselves.
from tests.support import github_ci  # noqa: E402
