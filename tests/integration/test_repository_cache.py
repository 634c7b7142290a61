"""The repository cache against real git: mirrors fetched under their lock, pushes, tokens."""

from __future__ import annotations

import fcntl
import os
import subprocess
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support.git_http import GitHttpServer
from tests.support.git_http import http_remote as http_remote
from tests.support.git_remote import BRANCH, TOKEN, Remote, commit, git, prepare
from tests.support.git_remote import cache as cache
from tests.support.git_remote import remote as remote
from worker.exceptions import GitError, PreflightError, WorkspaceError
from worker.git import runner
from worker.git.cache import RepositoryCache
from worker.git.runner import GitCredentials, head_sha


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
    real_run_git = runner.run_git

    def spying_run_git(args: Sequence[str], **kwargs: Any) -> str:
        if args[0] in ("fetch", "worktree"):
            held_during[args[0]] = _locked_by_someone_else(lock_file)
        return real_run_git(args, **kwargs)

    monkeypatch.setattr(runner, "run_git", spying_run_git)
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
