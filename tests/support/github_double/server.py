"""The GitHub double: FakeGitHub's state and routes behind a real socket, with GitHub's auth.

On top of `tests.support.github_http.FakeGitHub` (issues, comments, reactions, labels, pulls,
check runs, permissions, GraphQL draft/ready) it adds what only a deployed App meets: the App JWT
checked against the test App's public key before an installation token is issued; tokens that
expire and are refused (401) on the API and on git; smart-HTTP git through `git http-backend`;
rate-limit headers, `Location`, `Link` pagination; faults by count, by fraction and by delay;
signed deliveries built from its own state. Every API request is checked against GitHub's
OpenAPI description as it arrives; a violation fails the test at teardown.
"""

from __future__ import annotations

import base64
import json
import random
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jwt
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support import webhooks
from tests.support.github_api import check_request
from tests.support.github_ci import LOG_DOWNLOADS, download
from tests.support.github_double.git_http import git, refs_of, run_backend
from tests.support.github_http import APP_LOGIN, Call, FakeGitHub

APP_ID = 4242
REPO_PATH_RE = re.compile(r"/api/v3/repos/(?P<repo>[^/]+/[^/]+)")
RATE_LIMIT = 5000


@dataclass
class Token:
    installation_id: int
    value: str
    expires: float  # time.time() after which it is refused
    repositories: list[str] | None = None  # the names it was narrowed to; None: all


@dataclass(frozen=True)
class TokenUse:
    """A repository an installation token was used on, over the API or git."""

    token: str
    repo: str
    via: str  # "api", "graphql" or "git"


class GitHubDouble(FakeGitHub):
    """GitHub at http://127.0.0.1:<port>: REST under /api/v3, GraphQL at /api/graphql, git
    under /git/<owner>/<name>.git."""

    def __init__(self, root: Path, *, token_ttl: float = 3600.0) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        super().__init__(None, api=f"{self.base}/api/v3")
        self.root = root
        self.git_root = root / "git"
        self.git_root.mkdir(parents=True, exist_ok=True)
        self.app_id = APP_ID
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.token_ttl = token_ttl
        self.issued: dict[str, Token] = {}
        self.token_uses: list[TokenUse] = []
        self.violations: list[str] = []
        self.git_requests: list[tuple[str, str, int]] = []
        self.pushes: list[dict[str, Any]] = []
        self.lock = threading.RLock()
        self.fail_fraction = 0.0
        self.fail_fraction_status = 502
        self.delay = 0.0
        self.random = random.Random(9)
        self.rate_used = 0
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # the App's identity -------------------------------------------------------------------

    @property
    def private_key_pem(self) -> str:
        """GITHUB_PRIVATE_KEY for the App under test (the double keeps the public half)."""
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()

    def issue_token(self, installation_id: int, ttl: float | None = None) -> str:
        """A token as access_tokens would issue it (for tests that talk to the double)."""
        value = f"ghs_{uuid.uuid4().hex}"
        ttl = self.token_ttl if ttl is None else ttl
        self.issued[value] = Token(installation_id, value, time.time() + ttl)
        return value

    def expire_tokens(self) -> None:
        """Every token issued so far is now past its expiry."""
        for token in self.issued.values():
            token.expires = 0.0

    def secrets(self) -> list[str]:
        """Every credential the double knows: tokens it issued and the App's private key."""
        return [*self.issued, self.private_key_pem.split("\n")[1]]

    # setting the scene --------------------------------------------------------------------

    def add_repository(
        self, full_name: str, source: Path, *, default_branch: str = "main", installation: int = 1
    ) -> str:
        """A repository served over git from a copy of `source` (a work tree with commits);
        its clone URL."""
        bare = self.git_root / f"{full_name}.git"
        bare.parent.mkdir(parents=True, exist_ok=True)
        git("clone", "--bare", "--quiet", str(source), str(bare))
        git("symbolic-ref", "HEAD", f"refs/heads/{default_branch}", cwd=bare)
        clone_url = f"{self.base}/git/{full_name}.git"
        self.add_repo(full_name, clone_url, default_branch=default_branch)
        self.repos[full_name]["_installation"] = installation
        self._refresh_heads(full_name)
        return clone_url

    def bare(self, full_name: str) -> Path:
        return self.git_root / f"{full_name}.git"

    def file_at(self, repo: str, ref: str, path: str) -> str | None:
        """A file set by the test, else as git has it at `ref` (a branch or a commit), as
        GitHub's contents API reads the repository."""
        text = super().file_at(repo, ref, path)
        if text is not None or repo not in self.repos:
            return text
        shown = subprocess.run(
            ["git", "show", f"{ref}:{path}"],
            cwd=self.bare(repo),
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        return shown.stdout if shown.returncode == 0 else None

    def push_files(
        self, repo: str, files: dict[str, str], message: str, *, branch: str = "main"
    ) -> dict[str, Any]:
        """A person commits `files` on `branch` and pushes over smart HTTP with a token the
        double issued, as `git push` would; the recorded push (see `pushes`, `push_payload`)."""
        work = self.root / "people" / f"{uuid.uuid4().hex[:8]}"
        token = self.issue_token(self.installation_of(repo), ttl=300)
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        auth = ["-c", f"http.extraHeader=Authorization: Basic {basic}"]
        url = self.repos[repo]["clone_url"]
        git(*auth, "clone", "-q", "--branch", branch, url, str(work))
        for name, text in files.items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_text(text)
        who = ["-c", "user.name=Alice", "-c", "user.email=alice@example.com"]
        git("add", "-A", cwd=work)
        git(*who, "-c", "commit.gpgSign=false", "commit", "-qm", message, cwd=work)
        pushed = len(self.pushes)
        git(*auth, "push", "-q", "origin", f"HEAD:refs/heads/{branch}", cwd=work)
        [push] = self.pushes[pushed:]
        return push

    # faults ---------------------------------------------------------------------------------

    def fail_next(
        self, times: int, *, status: int = 502, path: str = ".", method: str = ""
    ) -> None:
        """The next `times` API calls (of `method`, or of each method, on a path matching the
        regex `path`) answer `status`."""
        for verb in [method] if method else ["GET", "POST", "PATCH", "PUT", "DELETE"]:
            self.fail(verb, path, status, times=times)

    def fail_some(self, fraction: float, status: int = 502) -> None:
        """Answer `fraction` of API calls (token requests included) with `status`."""
        self.fail_fraction, self.fail_fraction_status = fraction, status

    def throttle_next(
        self, times: int, retry_after: int = 1, *, path: str = ".", method: str = ""
    ) -> None:
        """The next `times` calls (of `method`, or of each method) are refused as GitHub's
        secondary rate limit does."""
        for verb in [method] if method else ["GET", "POST", "PATCH", "PUT", "DELETE"]:
            self.fail(
                verb,
                path,
                403,
                times=times,
                headers={"Retry-After": str(retry_after)},
                body={"message": "You have exceeded a secondary rate limit."},
            )

    def land_then_fail(self, method: str, path: str, status: int = 502) -> None:
        """The next matching write takes effect, then answers `status`."""
        self.fail(method, path, status, land=True)

    # what happened --------------------------------------------------------------------------

    def requests_made(self) -> list[Call]:
        """Every API request that reached the double, in order (faulted ones too)."""
        with self.lock:
            return list(self.calls)

    def misused_tokens(self) -> list[str]:
        """Every way a token was used on a repository it does not serve: outside its
        installation, or outside the repositories it was narrowed to (GitHub refuses both)."""
        wrong = []
        for use in self.token_uses:
            token = self.issued[use.token]
            record = self.repos.get(use.repo)
            name = use.repo.split("/")[-1]
            if record is None or record["_installation"] != token.installation_id:
                owner = token.installation_id
                wrong.append(f"{use.via} {use.repo} with installation {owner}'s token")
            elif token.repositories is not None and name not in token.repositories:
                wrong.append(f"{use.via} {use.repo} with a token for {token.repositories}")
        return sorted(set(wrong))

    def check(self) -> None:
        """Fail if any request broke GitHub's OpenAPI description."""
        assert not self.violations, "requests GitHub would refuse:\n" + "\n".join(self.violations)

    # deliveries -----------------------------------------------------------------------------

    def installation_of(self, repo: str) -> int:
        return int(self.repos[repo]["_installation"])

    def _scene(self, repo: str, payload: dict[str, Any], sender: dict[str, Any]) -> None:
        record = self.repos[repo]
        owner, name = repo.split("/")
        payload["repository"].update(
            {
                "id": record["id"],
                "name": name,
                "full_name": repo,
                "default_branch": record["default_branch"],
                "clone_url": record["clone_url"],
                "url": record["url"],
                "html_url": record["html_url"],
            }
        )
        payload["repository"]["owner"].update({"login": owner, "name": owner})
        payload["installation"] = {"id": self.installation_of(repo), "node_id": "MDIz"}
        payload["sender"].update(sender)

    def sender(self, login: str, kind: str = "User") -> dict[str, Any]:
        return {"login": login, "type": kind, "id": abs(hash(login)) % 10**6}

    def labeled_payload(self, repo: str, number: int, label: str, sender: str) -> dict[str, Any]:
        """issues.labeled for this issue as it stands (the label added to its state)."""
        payload = webhooks.example("issues", "labeled.payload.json")
        issue = self.issues[(repo, number)]
        if label not in [item["name"] for item in issue["labels"]]:
            issue["labels"].append({"name": label, "id": next(self.ids)})
        kind = "Bot" if sender.endswith("[bot]") else "User"
        self._scene(repo, payload, self.sender(sender, kind))
        payload["issue"].update(
            {"number": number, "title": issue["title"], "body": issue["body"], "id": issue["id"]}
        )
        payload["issue"]["user"]["login"] = issue["user"]["login"]
        payload["label"]["name"] = label
        payload["issue"]["labels"] = [
            {**payload["label"], "name": item["name"]} for item in issue["labels"]
        ]
        return payload

    def comment_payload(
        self, repo: str, number: int, body: str, sender: str, comment_id: int | None = None
    ) -> dict[str, Any]:
        """issue_comment.created for a comment on this issue (a new one unless `comment_id`)."""
        payload = webhooks.example("issue_comment", "created.with-installation.payload.json")
        kind = "Bot" if sender.endswith("[bot]") else "User"
        self._scene(repo, payload, self.sender(sender, kind))
        issue = self.issues[(repo, number)]
        payload["issue"].update({"number": number, "title": issue["title"], "id": issue["id"]})
        if "pull_request" in issue:
            payload["issue"]["pull_request"] = {
                "url": issue["url"],
                "html_url": issue["html_url"],
                "diff_url": issue["html_url"] + ".diff",
                "patch_url": issue["html_url"] + ".patch",
                "merged_at": None,
            }
        payload["comment"].update({"id": comment_id or next(self.ids), "body": body})
        payload["comment"]["user"].update({"login": sender, "type": kind})
        return payload

    def push_payload(self, push: dict[str, Any], sender: str) -> dict[str, Any]:
        """push for one recorded push (see `pushes`), with its commits' files from git."""
        repo = push["repo"]
        payload = webhooks.example("push", "with-new-branch.payload.json")
        kind = "Bot" if sender.endswith("[bot]") else "User"
        self._scene(repo, payload, self.sender(sender, kind))
        before, after = push["before"], push["after"]
        bare = self.bare(repo)
        span = after if before == "0" * 40 else f"{before}..{after}"
        shas = git("rev-list", "--reverse", span, cwd=bare).split() if after != "0" * 40 else []
        template = payload["commits"][0]
        commits = []
        for sha in shas:
            changes = git("show", "--name-status", "--format=%s", sha, cwd=bare).splitlines()
            files: dict[str, list[str]] = {"A": [], "M": [], "D": []}
            for line in changes[1:]:
                if "\t" in line:
                    status, path = line.split("\t", 1)
                    files.setdefault(status[0], []).append(path)
            commits.append(
                {
                    **template,
                    "id": sha,
                    "tree_id": sha,
                    "message": changes[0] if changes else "",
                    "added": files["A"],
                    "modified": files["M"],
                    "removed": files["D"],
                }
            )
        payload.update(
            {
                "ref": push["ref"],
                "before": before,
                "after": after,
                "created": before == "0" * 40,
                "deleted": after == "0" * 40,
                "commits": commits,
                "head_commit": commits[-1] if commits else None,
            }
        )
        payload["pusher"] = {"name": sender, "email": None}
        return payload

    def deliver(
        self,
        web_url: str,
        event: str,
        payload: dict[str, Any],
        *,
        secret: str = webhooks.SECRET,
        delivery_id: str | None = None,
    ) -> requests.Response:
        """Check `payload` against the event's schema, sign it and POST it as GitHub does."""
        webhooks.validate(event, payload)
        body = json.dumps(payload).encode()
        headers = webhooks.headers(event, body, delivery_id=delivery_id, secret=secret)
        return requests.post(web_url, data=body, headers=headers, timeout=30)

    def app_comments(self) -> list[dict[str, Any]]:
        """Comments the App wrote (to replay them as issue_comment deliveries)."""
        return [c for c in self.comments.values() if c["user"]["login"] == APP_LOGIN]

    # the HTTP side --------------------------------------------------------------------------

    def start(self) -> GitHubDouble:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _refresh_heads(self, repo: str) -> dict[str, str]:
        refs = refs_of(self.bare(repo))
        for name, sha in refs.items():
            self.branch_heads[(repo, name.removeprefix("refs/heads/"))] = sha
        for pull in self.pulls_of(repo):
            head = refs.get(f"refs/heads/{pull['head']['ref']}")
            if head:
                pull["head"]["sha"] = head
        return refs

    def live(self, value: str) -> Token | None:
        token = self.issued.get(value)
        return token if token is not None and token.expires > time.time() else None

    def answer_api(
        self, method: str, target: str, headers: dict[str, str], raw: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        url = urlsplit(target)
        try:
            check_request(method, target, raw or None)
        except AssertionError as error:  # GitHub would refuse it: the test fails at teardown
            self.violations.append(f"{method} {target}: {error}")
            return 422, {}, _json({"message": "Invalid request.", "errors": [str(error)[:500]]})
        refused = self._authorize(url.path, headers)
        if refused is not None:
            with self.lock:
                self.calls.append(Call(method, url.path, {}, None, 401))
            return refused
        self._note_use(url.path, headers, raw)
        if self.delay:
            time.sleep(self.delay)
        with self.lock:
            if self.fail_fraction and self.random.random() < self.fail_fraction:
                self.calls.append(Call(method, url.path, {}, None, self.fail_fraction_status))
                return self.fail_fraction_status, {}, _json({"message": "Server Error"})
            # FakeGitHub answers a timeout fault with the exception `responses` would raise.
            answer: Any = self.handle(method, self.base + target, raw or None)
            if isinstance(answer, Exception):
                return 504, {}, _json({"message": "timeout"})
            status, answer_headers, text = answer
            if url.path.endswith("/access_tokens") and status == 201:
                text = self._issued_answer(url.path, text, raw)
            self.rate_used += 1
        if not text:  # a redirect (a job's log): no body, its Location says where
            return status, {**answer_headers, **self._rate_headers()}, b""
        payload = json.loads(text)
        extra = self._rate_headers()
        if status == 201 and isinstance(payload, dict) and isinstance(payload.get("url"), str):
            extra["Location"] = payload["url"]
        if method == "GET" and isinstance(payload, list):
            payload, extra["Link"] = _page(payload, self.base + target)
            if not extra["Link"]:
                del extra["Link"]
        if status == 404 and isinstance(payload, dict):
            payload = {**payload, "documentation_url": "https://docs.github.com/rest"}
        return status, {**answer_headers, **extra}, _json(payload)

    def _issued_answer(self, path: str, text: str, raw: bytes) -> str:
        answer = json.loads(text)
        installation = int(path.split("/")[-2])
        expires = time.time() + self.token_ttl
        narrowed = json.loads(raw).get("repositories") if raw else None
        self.issued[answer["token"]] = Token(installation, answer["token"], expires, narrowed)
        answer["expires_at"] = datetime.fromtimestamp(expires, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return json.dumps(answer)

    def _authorize(
        self, path: str, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes] | None:
        scheme, _, credential = headers.get("authorization", "").partition(" ")
        if path.startswith("/api/v3/app"):
            try:
                claims = jwt.decode(
                    credential, self.key.public_key(), algorithms=["RS256"], leeway=60
                )
            except jwt.PyJWTError as error:
                return _unauthorized(f"A JSON web token could not be decoded ({error})")
            if str(claims.get("iss")) != str(self.app_id):
                return _unauthorized("'Issuer' claim ('iss') must be an Integer")
            return None
        if scheme.lower() not in ("token", "bearer") or self.live(credential) is None:
            return _unauthorized("Bad credentials")
        return None

    def _note_use(self, path: str, headers: dict[str, str], raw: bytes) -> None:
        """Remember which repository an installation token touched (API and GraphQL)."""
        credential = headers.get("authorization", "").partition(" ")[2]
        if credential not in self.issued:
            return  # the App's JWT, which serves no repository
        match = REPO_PATH_RE.match(path)
        if match:
            with self.lock:
                self.token_uses.append(TokenUse(credential, match["repo"], "api"))
        elif path == "/api/graphql" and raw:
            variables = json.loads(raw).get("variables") or {}
            node = (variables.get("input") or {}).get("pullRequestId")
            with self.lock:
                for (repo, _), pull in self.pulls.items():
                    if pull["node_id"] == node:
                        self.token_uses.append(TokenUse(credential, repo, "graphql"))
                # Review threads: read by owner and name, resolved by the thread's node id.
                if "owner" in variables and "name" in variables:
                    repo = f"{variables['owner']}/{variables['name']}"
                    self.token_uses.append(TokenUse(credential, repo, "graphql"))
                thread = self.threads.get(str(variables.get("threadId", "")))
                if thread is not None:
                    self.token_uses.append(TokenUse(credential, thread["_repo"], "graphql"))

    def _rate_headers(self) -> dict[str, str]:
        return {
            "X-RateLimit-Limit": str(RATE_LIMIT),
            "X-RateLimit-Remaining": str(max(RATE_LIMIT - self.rate_used, 0)),
            "X-RateLimit-Used": str(self.rate_used),
            "X-RateLimit-Reset": str(int(time.time()) + 3600),
            "X-RateLimit-Resource": "core",
            "X-GitHub-Request-Id": uuid.uuid4().hex[:16].upper(),
        }

    def answer_git(
        self, method: str, target: str, headers: dict[str, str], raw: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        url = urlsplit(target)
        scheme, _, encoded = headers.get("authorization", "").partition(" ")
        user, _, password = (
            base64.b64decode(encoded).decode(errors="replace").partition(":")
            if scheme.lower() == "basic"
            else ("", "", "")
        )
        if user != "x-access-token" or self.live(password) is None:
            self.git_requests.append((method, url.path, 401))
            return 401, {"WWW-Authenticate": 'Basic realm="GitHub"'}, b"Invalid credentials\n"
        path_info = url.path.removeprefix("/git")
        repo = path_info.split(".git/")[0].lstrip("/")
        with self.lock:
            self.token_uses.append(TokenUse(password, repo, "git"))
        receive = path_info.endswith("/git-receive-pack")
        before = refs_of(self.bare(repo)) if receive and repo in self.repos else {}
        status, answer, body = run_backend(
            self.git_root, method, path_info, url.query, headers, raw
        )
        self.git_requests.append((method, url.path, status))
        if receive and repo in self.repos:
            with self.lock:
                after = self._refresh_heads(repo)
                for ref in sorted(set(before) | set(after)):
                    if before.get(ref) != after.get(ref):
                        self.pushes.append(
                            {
                                "repo": repo,
                                "ref": ref,
                                "before": before.get(ref, "0" * 40),
                                "after": after.get(ref, "0" * 40),
                            }
                        )
        return status, answer, body


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


def _unauthorized(message: str) -> tuple[int, dict[str, str], bytes]:
    body = {"message": message, "documentation_url": "https://docs.github.com/rest"}
    return 401, {"Content-Type": "application/json"}, _json(body)


def _page(items: list[Any], url: str) -> tuple[list[Any], str]:
    """One page of a list answer and its Link header, as GitHub paginates (per_page ≤ 100)."""
    parts = urlsplit(url)
    query = dict(pair.split("=", 1) for pair in parts.query.split("&") if "=" in pair)
    per_page = min(int(query.get("per_page", 30)), 100)
    page = max(int(query.get("page", 1)), 1)
    last = max((len(items) + per_page - 1) // per_page, 1)

    def link(number: int) -> str:
        rest = {**query, "per_page": str(per_page), "page": str(number)}
        return parts._replace(query="&".join(f"{k}={v}" for k, v in rest.items())).geturl()

    rels = []
    if page < last:
        rels += [f'<{link(page + 1)}>; rel="next"', f'<{link(last)}>; rel="last"']
    if page > 1:
        rels += [f'<{link(1)}>; rel="first"', f'<{link(page - 1)}>; rel="prev"']
    return items[(page - 1) * per_page : page * per_page], ", ".join(rels)


def _handler(double: GitHubDouble) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            headers = {name.lower(): value for name, value in self.headers.items()}
            raw = self._body(headers)
            if raw is None:  # the client died mid-request (a killed worker): GitHub drops it
                self.close_connection = True
                return
            try:
                if self.path.startswith("/git/"):
                    status, answer, data = double.answer_git(self.command, self.path, headers, raw)
                elif self.path.startswith(LOG_DOWNLOADS):  # a signed download, not the API
                    status, answer, text = download(double, self.path)
                    data = text.encode()
                else:
                    status, answer, data = double.answer_api(self.command, self.path, headers, raw)
                    answer.setdefault("Content-Type", "application/json; charset=utf-8")
            except Exception as error:  # the double's own bug: fail the test, not hang it
                double.violations.append(
                    f"{self.command} {self.path}: the double failed: {error!r}"
                )
                status, answer, data = 500, {}, _json({"message": "Server Error"})
            self.send_response(status)
            for name, value in {**answer, "Content-Length": str(len(data))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _body(self, headers: dict[str, str]) -> bytes | None:
            """The request's body; None when the connection ended before all of it came."""
            if headers.get("transfer-encoding", "").lower() == "chunked":
                chunks: list[bytes] = []
                while True:
                    line = self.rfile.readline()
                    if not line.strip():
                        return None
                    size = int(line.split(b";")[0].strip(), 16)
                    if size == 0:
                        self.rfile.readline()
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    if len(chunks[-1]) < size:
                        return None
                    self.rfile.readline()
            length = int(headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            return raw if len(raw) == length else None

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def github_double(root: Path, **options: Any) -> Iterator[GitHubDouble]:
    """A started double; at the end it stops and fails if any request broke the OpenAPI
    description."""
    double = GitHubDouble(root, **options).start()
    try:
        yield double
    finally:
        double.stop()
    double.check()
