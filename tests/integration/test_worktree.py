"""A run's worktree against real git: reused, refused, removed, parked as a spare."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.git_remote import BRANCH, Remote, commit, git, prepare
from tests.support.git_remote import cache as cache
from tests.support.git_remote import remote as remote
from worker.exceptions import GitError, WorkspaceError
from worker.git.cache import RepositoryCache
from worker.git.runner import head_sha
from worker.git.worktree import LEASE_REF


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
    git(worktree.path, "update-ref", "-d", LEASE_REF)

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


def test_removing_twice_is_harmless(cache: RepositoryCache, remote: Remote) -> None:
    worktree = prepare(cache, remote, "run-1")
    cache.remove(worktree)

    cache.remove(worktree)

    assert not worktree.path.exists()


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


def test_a_spare_does_not_carry_its_old_lease(cache: RepositoryCache, remote: Remote) -> None:
    first = prepare(cache, remote, "run-1", branch="reqdrive/first")
    commit(first.path, "story-1.txt", "one\n")
    cache.push(first)
    cache.remove(first)
    second = prepare(cache, remote, "run-2")
    commit(second.path, "story-1.txt", "one\n")

    assert cache.push(second) == remote.head(BRANCH)


# --- the agent's view and the worker's checks after it ------------------------------------


def test_the_agents_git_sees_its_branch_and_base_but_its_commits_stay_out_of_the_mirror(
    cache: RepositoryCache, remote: Remote, tmp_path: Path
) -> None:
    worktree = prepare(cache, remote, "run-1")
    story = commit(worktree.path, "story-1.txt", "one\n")
    view = cache.agent_view(worktree, tmp_path / "view")
    # As the sandbox binds it: the view's `.git` file over the checkout's.
    agent_env = {**os.environ, "GIT_DIR": str(view.git_dir), "GIT_WORK_TREE": str(worktree.path)}

    def agent_git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=worktree.path, env=agent_env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert agent_git("status", "--porcelain") == ""
    assert agent_git("symbolic-ref", "HEAD") == f"refs/heads/{BRANCH}"
    assert agent_git("rev-parse", "HEAD") == story
    assert agent_git("diff", "--name-only", "origin/main") == "story-1.txt"
    (worktree.path / "story-2.txt").write_text("two\n")
    agent_git("add", "story-2.txt")
    agent_git("commit", "-q", "-m", "the agent's own commit")

    assert head_sha(worktree.path) == story  # the run's branch moves only by the worker
    assert git(worktree.path, "status", "--porcelain") == "?? story-2.txt"


def test_secure_puts_back_a_git_file_and_a_mirror_config_the_agent_rewrote(
    cache: RepositoryCache, remote: Remote, tmp_path: Path
) -> None:
    worktree = prepare(cache, remote, "run-1")
    elsewhere = tmp_path / "elsewhere"
    git(tmp_path, "init", "-q", str(elsewhere))
    (worktree.path / ".git").write_text(f"gitdir: {elsewhere / '.git'}\n")
    mirror = cache.mirror_path(remote.url)
    git(mirror, "config", "core.sshCommand", "touch /tmp/pwned")

    cache.secure(worktree)

    assert (worktree.path / ".git").read_text() == f"gitdir: {worktree.git_dir}\n"
    assert git(worktree.path, "rev-parse", "HEAD") == remote.head()
    assert "sshcommand" not in (mirror / "config").read_text().lower()


def test_a_checkout_off_the_runs_branch_is_refused_before_a_commit_or_push(
    cache: RepositoryCache, remote: Remote
) -> None:
    worktree = prepare(cache, remote, "run-1")
    git(worktree.path, "checkout", "-q", "--detach")

    with pytest.raises(WorkspaceError, match="detached HEAD"):
        cache.check_worktree(worktree)
    with pytest.raises(WorkspaceError, match="refusing to commit or push"):
        cache.push(worktree)
