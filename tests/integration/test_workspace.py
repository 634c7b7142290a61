"""Repository cache and worktrees against real git: a bare remote, a token-checking HTTP remote."""

from __future__ import annotations

import base64
import fcntl
import os
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import running
from worker.exceptions import GitError, PreflightError, WorkspaceError
from worker.git import workspace
from worker.git.workspace import (
    GitCredentials,
    RepositoryCache,
    Worktree,
    head_sha,
    run_git,
)

TOKEN = "ghs_workspaceTestToken0123456789abcdefABCDEF"
BRANCH = "reqdrive/req-001-add-login"


def git(cwd: Path, *args: str) -> str:
    """Test-side git, independent of the runner under test."""
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def commit(repo: Path, name: str, content: str) -> str:
    (repo / name).parent.mkdir(parents=True, exist_ok=True)
    (repo / name).write_text(content)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"change {name}")
    return git(repo, "rev-parse", "HEAD")


class Remote:
    """A bare repository standing in for GitHub, and a human's clone of it."""

    def __init__(self, root: Path) -> None:
        self.bare = root / "remote.git"
        self.human = root / "human"
        git(root, "init", "-q", "--bare", str(self.bare))
        git(root, "clone", "-q", str(self.bare), str(self.human))
        commit(self.human, "README.md", "hello\n")
        git(self.human, "push", "-q", "origin", "main")

    @property
    def url(self) -> str:
        return str(self.bare)

    def push_commit(self, name: str, branch: str = "main") -> str:
        git(self.human, "checkout", "-q", "-B", branch, f"origin/{branch}")
        sha = commit(self.human, name, f"{name}\n")
        git(self.human, "push", "-q", "origin", f"HEAD:refs/heads/{branch}")
        return sha

    def new_branch(self, branch: str, name: str) -> str:
        git(self.human, "checkout", "-q", "-B", branch, "origin/main")
        sha = commit(self.human, name, f"{name}\n")
        git(self.human, "push", "-q", "origin", f"HEAD:refs/heads/{branch}")
        git(self.human, "fetch", "-q", "origin")
        return sha

    def head(self, branch: str = "main") -> str:
        return git(self.bare, "rev-parse", f"refs/heads/{branch}")


@pytest.fixture
def remote(tmp_path: Path) -> Remote:
    return Remote(tmp_path)


@pytest.fixture
def cache(tmp_path: Path) -> RepositoryCache:
    return RepositoryCache(tmp_path / "cache", environment=os.environ)


def prepare(
    cache: RepositoryCache,
    remote: Remote,
    run_id: str,
    *,
    branch: str = BRANCH,
    base_ref: str | None = None,
) -> Worktree:
    return cache.prepare(remote.url, run_id=run_id, branch=branch, base_ref=base_ref)


# --- cache and worktrees ---------------------------------------------------------------------


def test_cold_prepare_creates_mirror_and_worktree_at_base(
    cache: RepositoryCache, remote: Remote
) -> None:
    worktree = prepare(cache, remote, "run-1")

    assert worktree.path == cache.worktrees_dir / "run-1"
    assert (worktree.path / "README.md").read_text() == "hello\n"
    assert git(worktree.path, "symbolic-ref", "HEAD") == f"refs/heads/{BRANCH}"
    assert head_sha(worktree.path) == remote.head() == worktree.base_sha
    assert (worktree.base_ref, worktree.resumed) == ("main", False)
    mirror = cache.mirror_path(remote.url)
    assert git(mirror, "rev-parse", "--is-bare-repository") == "true"
    assert git(worktree.path, "config", "user.name") == "reqdrive"


def test_second_prepare_fetches_incrementally_into_the_same_mirror(
    cache: RepositoryCache, remote: Remote
) -> None:
    prepare(cache, remote, "run-1")
    mirror = cache.mirror_path(remote.url)
    objects_inode = (mirror / "objects").stat().st_ino
    (mirror / "reqdrive-test-marker").write_text("a re-clone would delete this")
    new_sha = remote.push_commit("feature.txt")

    second = prepare(cache, remote, "run-2", branch="reqdrive/other")

    assert (mirror / "reqdrive-test-marker").exists()
    assert (mirror / "objects").stat().st_ino == objects_inode
    assert git(mirror, "cat-file", "-t", new_sha) == "commit"
    assert head_sha(second.path) == new_sha == second.base_sha
    assert (second.path / "feature.txt").exists()


def test_explicit_base_ref_is_used(cache: RepositoryCache, remote: Remote) -> None:
    release = remote.new_branch("release", "release.txt")

    worktree = prepare(cache, remote, "run-1", base_ref="release")

    assert (worktree.base_ref, worktree.base_sha) == ("release", release)
    assert head_sha(worktree.path) == release


def test_unknown_base_ref_is_a_workspace_error(cache: RepositoryCache, remote: Remote) -> None:
    with pytest.raises(WorkspaceError, match="no-such-branch"):
        prepare(cache, remote, "run-1", base_ref="no-such-branch")


def test_existing_remote_branch_is_resumed(cache: RepositoryCache, remote: Remote) -> None:
    pushed = remote.new_branch(BRANCH, "story-1.txt")

    worktree = prepare(cache, remote, "run-1")

    assert worktree.resumed
    assert head_sha(worktree.path) == pushed
    assert worktree.base_sha == remote.head("main")
    assert (worktree.path / "story-1.txt").exists()


def test_push_then_push_again_after_another_commit(cache: RepositoryCache, remote: Remote) -> None:
    worktree = prepare(cache, remote, "run-1")
    first = commit(worktree.path, "story-1.txt", "one\n")

    assert cache.push(worktree) == first == remote.head(BRANCH)

    second = commit(worktree.path, "story-2.txt", "two\n")
    assert cache.push(worktree) == second == remote.head(BRANCH)


def test_push_refuses_to_clobber_a_foreign_push(cache: RepositoryCache, remote: Remote) -> None:
    worktree = prepare(cache, remote, "run-1")
    commit(worktree.path, "story-1.txt", "one\n")
    cache.push(worktree)
    git(remote.human, "fetch", "-q", "origin")
    human = remote.push_commit("human-fix.txt", branch=BRANCH)
    commit(worktree.path, "story-2.txt", "two\n")

    with pytest.raises(GitError, match="stale info"):
        cache.push(worktree)

    assert remote.head(BRANCH) == human


def test_first_push_refuses_a_branch_someone_created_meanwhile(
    cache: RepositoryCache, remote: Remote
) -> None:
    worktree = prepare(cache, remote, "run-1")
    human = remote.new_branch(BRANCH, "human.txt")
    commit(worktree.path, "story-1.txt", "one\n")

    with pytest.raises(GitError):
        cache.push(worktree)

    assert remote.head(BRANCH) == human


def test_reprepare_of_a_run_keeps_its_commits_and_drops_leftovers(
    cache: RepositoryCache, remote: Remote
) -> None:
    worktree = prepare(cache, remote, "run-1")
    story = commit(worktree.path, "story-1.txt", "one\n")
    (worktree.path / "half-written.py").write_text("partial")
    (worktree.path / "README.md").write_text("edited by the killed step\n")

    again = prepare(cache, remote, "run-1")

    assert again.path == worktree.path
    assert head_sha(again.path) == story
    assert not (again.path / "half-written.py").exists()
    assert (again.path / "README.md").read_text() == "hello\n"


def test_a_run_killed_after_its_push_landed_pushes_again_from_the_reused_checkout(
    cache: RepositoryCache, remote: Remote
) -> None:
    worktree = prepare(cache, remote, "run-1")
    first = commit(worktree.path, "story-1.txt", "one\n")
    cache.push(worktree)
    # The worker died between the push landing and recording it: the lease is the old one.
    git(worktree.path, "update-ref", "-d", workspace.LEASE_REF)

    again = prepare(cache, remote, "run-1")
    second = commit(again.path, "story-2.txt", "two\n")

    assert again.path == worktree.path and head_sha(again.path) == second
    assert cache.push(again) == second == remote.head(BRANCH)
    assert git(remote.bare, "rev-parse", f"{BRANCH}~1") == first


def test_a_reused_checkout_still_refuses_to_clobber_a_foreign_push(
    cache: RepositoryCache, remote: Remote
) -> None:
    worktree = prepare(cache, remote, "run-1")
    commit(worktree.path, "story-1.txt", "one\n")
    cache.push(worktree)
    git(remote.human, "fetch", "-q", "origin")
    human = remote.push_commit("human-fix.txt", branch=BRANCH)

    again = prepare(cache, remote, "run-1")
    commit(again.path, "story-2.txt", "two\n")

    with pytest.raises(GitError, match="stale info"):
        cache.push(again)
    assert remote.head(BRANCH) == human


def test_reprepare_recreates_a_worktree_left_on_the_wrong_branch(
    cache: RepositoryCache, remote: Remote
) -> None:
    worktree = prepare(cache, remote, "run-1")
    git(worktree.path, "checkout", "-q", "-b", "something-else")

    again = prepare(cache, remote, "run-1")

    assert git(again.path, "symbolic-ref", "HEAD") == f"refs/heads/{BRANCH}"


def test_a_branch_checked_out_by_another_run_is_refused(
    cache: RepositoryCache, remote: Remote
) -> None:
    prepare(cache, remote, "run-1")

    with pytest.raises(WorkspaceError, match="already checked out"):
        prepare(cache, remote, "run-2")


def test_remove_deletes_the_worktree_and_frees_the_branch(
    cache: RepositoryCache, remote: Remote
) -> None:
    worktree = prepare(cache, remote, "run-1")
    (worktree.path / "dirty.txt").write_text("uncommitted")

    cache.remove(worktree)

    assert not worktree.path.exists()
    mirror = cache.mirror_path(remote.url)
    assert str(worktree.path) not in git(mirror, "worktree", "list")
    assert prepare(cache, remote, "run-2").path.exists()


def test_concurrent_prepares_on_one_mirror_both_succeed(
    cache: RepositoryCache, remote: Remote
) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [
            pool.submit(prepare, cache, remote, f"run-{n}", branch=f"reqdrive/story-{n}")
            for n in (1, 2)
        ]
        worktrees = [future.result() for future in futures]

    for worktree in worktrees:
        assert head_sha(worktree.path) == remote.head()
        assert git(worktree.path, "status", "--porcelain") == ""
    assert len(list(cache.mirrors_dir.glob("*.git"))) == 1


def test_fetch_and_worktree_add_run_under_the_mirror_lock(
    cache: RepositoryCache, remote: Remote, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock_file = cache.mirror_path(remote.url).with_suffix(".git.lock")
    held_during: dict[str, bool] = {}
    real_run_git = workspace.run_git

    def spying_run_git(args: Sequence[str], **kwargs: Any) -> str:
        if args[0] in ("fetch", "worktree"):
            held_during[args[0]] = _locked_by_someone_else(lock_file)
        return real_run_git(args, **kwargs)

    monkeypatch.setattr(workspace, "run_git", spying_run_git)
    prepare(cache, remote, "run-1")

    assert held_during == {"fetch": True, "worktree": True}


def _locked_by_someone_else(lock_file: Path) -> bool:
    with lock_file.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def test_corrupt_mirror_is_recreated(cache: RepositoryCache, remote: Remote) -> None:
    first = prepare(cache, remote, "run-1")
    cache.remove(first)
    mirror = cache.mirror_path(remote.url)
    for obj in (mirror / "objects").rglob("*"):
        if obj.is_file() and obj.parent.name != "info":
            obj.unlink()

    worktree = prepare(cache, remote, "run-2")

    assert head_sha(worktree.path) == remote.head()
    assert (worktree.path / "README.md").read_text() == "hello\n"


def test_mirror_that_is_no_repository_is_recreated(cache: RepositoryCache, remote: Remote) -> None:
    prepare(cache, remote, "run-1")
    mirror = cache.mirror_path(remote.url)
    (mirror / "HEAD").unlink()

    worktree = prepare(cache, remote, "run-2", branch="reqdrive/other")

    assert head_sha(worktree.path) == remote.head()


def test_a_changed_origin_url_is_put_back_without_a_new_clone(
    cache: RepositoryCache, remote: Remote, tmp_path: Path
) -> None:
    prepare(cache, remote, "run-1")
    mirror = cache.mirror_path(remote.url)
    objects_inode = (mirror / "objects").stat().st_ino
    git(mirror, "config", "remote.origin.url", str(tmp_path / "elsewhere.git"))

    worktree = prepare(cache, remote, "run-2", branch="reqdrive/other")

    assert git(mirror, "config", "remote.origin.url") == remote.url
    assert (mirror / "objects").stat().st_ino == objects_inode
    assert head_sha(worktree.path) == remote.head()


def test_hooks_planted_in_the_mirror_do_not_run(cache: RepositoryCache, remote: Remote) -> None:
    mirror = cache.mirror_path(remote.url)
    prepare(cache, remote, "run-1")
    marker = mirror.parent / "hook-ran"
    hook = mirror / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch '{marker}'\n")
    hook.chmod(0o755)

    prepare(cache, remote, "run-2", branch="reqdrive/other")

    assert not marker.exists()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("run_id", "../escape", "run id"),
        ("branch", "reqdrive/bad..name", "branch"),
        ("branch", "-x", "branch"),
    ],
)
def test_unsafe_names_are_refused(
    cache: RepositoryCache, remote: Remote, field: str, value: str, message: str
) -> None:
    options = {"run_id": "run-1", field: value}
    run_id = options.pop("run_id")
    # A run id is refused by the one rule all commands share (a preflight error).
    with pytest.raises((WorkspaceError, PreflightError), match=message):
        prepare(cache, remote, run_id, **options)
    assert not (cache.worktrees_dir / "escape").exists()


def test_credentials_in_the_url_are_refused(cache: RepositoryCache) -> None:
    with pytest.raises(WorkspaceError, match="credentials"):
        cache.prepare(
            f"https://x-access-token:{TOKEN}@github.com/o/r.git",
            branch=BRANCH,
            base_ref=None,
            run_id="run-1",
        )


def test_a_malformed_url_with_credentials_does_not_print_them(cache: RepositoryCache) -> None:
    with pytest.raises(WorkspaceError) as caught:
        cache.prepare(
            f"https://x-access-token:{TOKEN}@github.com/o/r.git\n",
            branch=BRANCH,
            base_ref=None,
            run_id="run-1",
        )

    assert TOKEN not in str(caught.value)


# --- the runner ------------------------------------------------------------------------------


def test_git_error_carries_command_and_stderr(tmp_path: Path) -> None:
    with pytest.raises(GitError) as caught:
        run_git(["rev-parse", "--verify", "no-such-ref"], cwd=tmp_path)

    error = caught.value
    assert error.command == ["rev-parse", "--verify", "no-such-ref"]
    assert error.returncode != 0
    assert "not a git repository" in error.stderr
    assert "rev-parse --verify no-such-ref" in str(error)


def test_unchecked_failure_returns_output(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    assert run_git(["rev-parse", "--verify", "--quiet", "nope"], cwd=tmp_path, check=False) == ""


def test_timeout_raises_and_kills_what_git_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    # sleep lets go of git's pipes, so only killing the whole group can stop it.
    alias = f"alias.hang=!echo $$ > '{pid_file}'; exec sleep 300 >/dev/null 2>&1"

    with pytest.raises(GitError, match="timed out") as caught:
        run_git(["-c", alias, "hang"], cwd=tmp_path, timeout_s=1)

    assert caught.value.returncode is None
    assert _dies(int(pid_file.read_text()))


def _dies(pid: int) -> bool:
    """SIGKILL lands asynchronously: allow the kernel a moment (not a speed assertion)."""
    for _ in range(100):
        if not running(pid):
            return True
        time.sleep(0.1)
    return False


def test_worker_secrets_are_not_passed_to_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_PRIVATE_KEY", "-----BEGIN secret-----")
    monkeypatch.setenv("REDIS_URL", "redis://secret@127.0.0.1/0")

    env = run_git(["-c", "alias.env=!env", "env"], cwd=tmp_path, environment=os.environ)

    assert "GIT_TERMINAL_PROMPT=0" in env
    assert "GITHUB_PRIVATE_KEY" not in env
    assert "REDIS_URL" not in env


def test_git_inherits_the_environment_its_cache_was_given_never_the_process_one(
    tmp_path: Path, remote: Remote, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LC_PROCESS_ONLY", "from os.environ")
    given = {"PATH": os.environ["PATH"], "LC_GIVEN": "from the caller"}
    worktree = prepare(RepositoryCache(tmp_path / "cache", environment=given), remote, "run-1")

    # In the run's checkout, whichever module runs git there (reset, diff, commit ...).
    env = run_git(["-c", "alias.env=!env", "env"], cwd=worktree.path)

    assert "LC_GIVEN=from the caller" in env
    assert "LC_PROCESS_ONLY" not in env
    # Outside any checkout a cache prepared, git inherits nothing unless the caller says.
    assert "LC_GIVEN" not in run_git(["-c", "alias.env=!env", "env"], cwd=tmp_path)


def test_credential_repr_hides_the_token() -> None:
    assert TOKEN not in repr(GitCredentials(TOKEN))


# --- credentials against an HTTP remote ------------------------------------------------------


class GitHttpServer(ThreadingHTTPServer):
    """git http-backend behind Basic auth, the way GitHub takes an installation token."""

    def __init__(self, root: Path, token: str) -> None:
        super().__init__(("127.0.0.1", 0), GitHttpHandler)
        self.root = root
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        self.expected = f"Basic {basic}"
        self.authorized: list[str] = []
        self.refused: list[str] = []
        self.backend = Path(git(root, "--exec-path")) / "git-http-backend"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class GitHttpHandler(BaseHTTPRequestHandler):
    server: GitHttpServer

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep test output clean

    def _serve(self) -> None:
        if self.headers.get("Authorization") != self.server.expected:
            self.server.refused.append(self.path)
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.server.authorized.append(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        output = subprocess.run(
            [str(self.server.backend)],
            input=body,
            env=self._cgi_env(len(body)),
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
        self._relay(output)

    def _cgi_env(self, length: int) -> dict[str, str]:
        path, _, query = self.path.partition("?")
        env = {
            "PATH": os.environ["PATH"],
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.environ.get("GIT_CONFIG_GLOBAL", os.devnull),
            "GIT_PROJECT_ROOT": str(self.server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": "x-access-token",  # lets http-backend accept pushes
            "REMOTE_ADDR": "127.0.0.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(length),
        }
        for header in ("Content-Encoding", "Git-Protocol"):
            if header in self.headers:
                env["HTTP_" + header.upper().replace("-", "_")] = self.headers[header]
        return env

    def _relay(self, output: bytes) -> None:
        separator = b"\r\n\r\n" if b"\r\n\r\n" in output else b"\n\n"
        head, _, payload = output.partition(separator)
        headers = [line.split(":", 1) for line in head.decode().splitlines() if ":" in line]
        status = next((int(v.split()[0]) for k, v in headers if k.lower() == "status"), 200)
        self.send_response(status)
        for key, value in headers:
            if key.lower() != "status":
                self.send_header(key, value.strip())
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def http_remote(remote: Remote) -> Iterator[tuple[str, GitHttpServer]]:
    server = GitHttpServer(remote.bare.parent, TOKEN)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"{server.base_url}/{remote.bare.name}", server
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def argv_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put a `git` on PATH that records every argv the worker uses, then runs the real git."""
    real_git = subprocess.run(
        ["sh", "-c", "command -v git"], capture_output=True, text=True, check=True
    ).stdout.strip()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "argv.log"
    wrapper = bin_dir / "git"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\nexec "{real_git}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def test_token_fetches_and_pushes_and_is_stored_nowhere(
    argv_log: Path,  # first: the cache takes the environment with the wrapper on PATH
    cache: RepositoryCache,
    remote: Remote,
    http_remote: tuple[str, GitHttpServer],
) -> None:
    url, server = http_remote
    credentials = GitCredentials(TOKEN)

    worktree = cache.prepare(
        url, branch=BRANCH, base_ref=None, run_id="run-1", credentials=credentials
    )
    story = commit(worktree.path, "story-1.txt", "one\n")
    cache.push(worktree, credentials=credentials)

    assert server.authorized
    assert remote.head(BRANCH) == story
    assert argv_log.read_text().count("\n") > 5  # the wrapper really saw the worker's git
    assert TOKEN not in argv_log.read_text()
    secrets = credentials.secrets()
    for file in cache.cache_dir.rglob("*"):
        if file.is_file():
            content = file.read_bytes()
            assert not any(secret.encode() in content for secret in secrets), file


def test_without_the_token_fetch_and_push_are_refused(
    cache: RepositoryCache, remote: Remote, http_remote: tuple[str, GitHttpServer]
) -> None:
    url, server = http_remote
    with pytest.raises(GitError, match=r"terminal prompts disabled|Authentication failed"):
        cache.prepare(url, branch=BRANCH, base_ref=None, run_id="run-1")
    assert server.refused

    credentials = GitCredentials(TOKEN)
    worktree = cache.prepare(
        url, branch=BRANCH, base_ref=None, run_id="run-2", credentials=credentials
    )
    commit(worktree.path, "story-1.txt", "one\n")
    with pytest.raises(GitError):
        cache.push(worktree)
    with pytest.raises(GitError):
        cache.push(worktree, credentials=GitCredentials("ghs_wrongToken0123456789"))
    assert git(remote.bare, "branch", "--list", BRANCH) == ""


def test_git_error_never_contains_the_token(
    tmp_path: Path, http_remote: tuple[str, GitHttpServer]
) -> None:
    url, _ = http_remote
    credentials = GitCredentials(TOKEN)
    # Ask git to print its HTTP headers unredacted, then fail: only our redaction is left.
    noisy = {"GIT_CURL_VERBOSE": "1", "GIT_TRACE_REDACT": "0"}

    with pytest.raises(GitError) as caught:
        run_git(
            ["ls-remote", url.replace("remote.git", "missing.git")],
            cwd=tmp_path,
            credentials=credentials,
            env=noisy,
        )

    error = caught.value
    assert "[REDACTED]" in error.stderr  # the header was there before redaction
    for secret in credentials.secrets():
        assert secret not in str(error)
        assert secret not in error.stderr
        assert all(secret not in part for part in error.command)


def test_a_url_rewrite_planted_in_the_mirror_does_not_take_the_token_elsewhere(
    cache: RepositoryCache, remote: Remote, http_remote: tuple[str, GitHttpServer]
) -> None:
    url, server = http_remote
    credentials = GitCredentials(TOKEN)
    elsewhere = GitHttpServer(remote.bare.parent, TOKEN)
    thread = threading.Thread(target=elsewhere.serve_forever, daemon=True)
    thread.start()
    mirror = cache.mirror_path(url)
    plant = ["config", f"url.{elsewhere.base_url}/.insteadOf", f"{server.base_url}/"]
    try:
        worktree = cache.prepare(
            url, branch=BRANCH, base_ref=None, run_id="run-1", credentials=credentials
        )
        commit(worktree.path, "story-1.txt", "one\n")
        git(mirror, *plant)
        cache.push(worktree, credentials=credentials)
        git(mirror, *plant)
        cache.prepare(
            url, branch="reqdrive/other", base_ref=None, run_id="run-2", credentials=credentials
        )
    finally:
        elsewhere.shutdown()
        elsewhere.server_close()
        thread.join()

    assert server.authorized
    assert elsewhere.authorized == []


def test_token_in_arguments_is_redacted_from_the_error(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")

    with pytest.raises(GitError) as caught:
        run_git(["rev-parse", "--verify", TOKEN], cwd=tmp_path, credentials=GitCredentials(TOKEN))

    assert TOKEN not in str(caught.value)
    assert TOKEN not in " ".join(caught.value.command)


# --- spare checkouts -------------------------------------------------------------------------


def test_a_removed_runs_checkout_is_reused_clean_at_the_new_base(
    cache: RepositoryCache, remote: Remote
) -> None:
    first = prepare(cache, remote, "run-1")
    readme_inode = (first.path / "README.md").stat().st_ino
    commit(first.path, "story-1.txt", "one\n")
    (first.path / "untracked.txt").write_text("left behind")
    (first.path / ".gitignore").write_text("build/\n")
    (first.path / "build").mkdir()
    (first.path / "build" / "artifact.bin").write_text("ignored output")
    cache.remove(first)
    new_base = remote.push_commit("upstream.txt")

    second = prepare(cache, remote, "run-2", branch="reqdrive/other")

    # The same file on disk: the checkout was moved and switched, not written anew.
    assert (second.path / "README.md").stat().st_ino == readme_inode
    assert head_sha(second.path) == new_base
    assert git(second.path, "symbolic-ref", "HEAD") == "refs/heads/reqdrive/other"
    assert git(second.path, "status", "--porcelain", "--ignored") == ""
    assert (second.path / "upstream.txt").exists()
    assert not (second.path / "story-1.txt").exists()
    assert not list(cache.spares_dir.rglob("README.md"))


def test_without_spares_remove_deletes_the_checkout(tmp_path: Path, remote: Remote) -> None:
    cache = RepositoryCache(tmp_path / "cache", spares_per_mirror=0)
    first = prepare(cache, remote, "run-1")

    cache.remove(first)

    assert not first.path.exists()
    assert not cache.spares_dir.exists()
    mirror = cache.mirror_path(remote.url)
    assert len(git(mirror, "worktree", "list").splitlines()) == 1  # the mirror alone


def test_spares_are_kept_up_to_the_limit(tmp_path: Path, remote: Remote) -> None:
    cache = RepositoryCache(tmp_path / "cache", spares_per_mirror=2)
    runs = [prepare(cache, remote, f"run-{n}", branch=f"reqdrive/s{n}") for n in range(3)]

    for worktree in runs:
        cache.remove(worktree)

    mirror = cache.mirror_path(remote.url)
    assert len(list(cache.spares_dir.glob("*/*"))) == 2
    assert len(git(mirror, "worktree", "list").splitlines()) == 3  # the mirror and two spares


def test_another_runs_fetch_does_not_move_the_lease(cache: RepositoryCache, remote: Remote) -> None:
    worktree = prepare(cache, remote, "run-1")
    commit(worktree.path, "story-1.txt", "one\n")
    cache.push(worktree)
    git(remote.human, "fetch", "-q", "origin")
    human = remote.push_commit("human-fix.txt", branch=BRANCH)
    prepare(cache, remote, "run-2", branch="reqdrive/other")  # fetches the human's push
    commit(worktree.path, "story-2.txt", "two\n")

    with pytest.raises(GitError, match="stale info"):
        cache.push(worktree)

    assert remote.head(BRANCH) == human


def test_a_spare_does_not_carry_its_old_lease(cache: RepositoryCache, remote: Remote) -> None:
    first = prepare(cache, remote, "run-1", branch="reqdrive/first")
    commit(first.path, "story-1.txt", "one\n")
    cache.push(first)
    cache.remove(first)
    second = prepare(cache, remote, "run-2")
    commit(second.path, "story-1.txt", "one\n")

    assert cache.push(second) == remote.head(BRANCH)


def test_removing_twice_is_harmless(cache: RepositoryCache, remote: Remote) -> None:
    worktree = prepare(cache, remote, "run-1")
    cache.remove(worktree)

    cache.remove(worktree)

    assert not worktree.path.exists()


def test_a_missing_working_folder_is_a_git_error(tmp_path: Path) -> None:
    with pytest.raises(GitError, match="could not start git"):
        run_git(["status"], cwd=tmp_path / "gone")


def test_git_locks_a_killed_worker_left_in_the_cache_are_cleared_for_the_resumed_run(
    cache: RepositoryCache, remote: Remote
) -> None:
    worktree = prepare(cache, remote, "run-1")
    commit(worktree.path, "story-1.txt", "one\n")
    cache.push(worktree)
    mirror = cache.mirror_path(remote.url)
    # A worker SIGKILLed inside git: its ref locks stay behind (seen after an e2e crash).
    left = [
        mirror / "refs" / "remotes" / "origin" / f"{BRANCH}.lock",
        mirror / "refs" / "heads" / f"{BRANCH}.lock",
        mirror / "packed-refs.lock",
    ]
    other_runs = mirror / "refs" / "heads" / "reqdrive" / "someone-elses.lock"
    for path in [*left, other_runs]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")

    again = prepare(cache, remote, "run-1")
    second = commit(again.path, "story-2.txt", "two\n")

    assert cache.push(again) == second == remote.head(BRANCH)
    assert not any(path.exists() for path in left)
    assert other_runs.exists()  # another run's commit may hold it right now
