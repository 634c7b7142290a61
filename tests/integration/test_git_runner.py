"""The one git runner: errors, timeouts, what git inherits, credentials kept out of sight."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.support.git_http import GitHttpServer
from tests.support.git_http import http_remote as http_remote
from tests.support.git_remote import TOKEN, Remote, git, prepare
from tests.support.git_remote import remote as remote
from tests.support.processes import running
from worker.exceptions import GitError
from worker.git.cache import RepositoryCache
from worker.git.runner import GitCredentials, run_git


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


def test_a_missing_working_folder_is_a_git_error(tmp_path: Path) -> None:
    with pytest.raises(GitError, match="could not start git"):
        run_git(["status"], cwd=tmp_path / "gone")


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


def test_token_in_arguments_is_redacted_from_the_error(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")

    with pytest.raises(GitError) as caught:
        run_git(["rev-parse", "--verify", TOKEN], cwd=tmp_path, credentials=GitCredentials(TOKEN))

    assert TOKEN not in str(caught.value)
    assert TOKEN not in " ".join(caught.value.command)


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
