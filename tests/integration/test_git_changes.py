"""A run's git steps on a real worktree of the repository cache, over a bare remote."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from worker.git.cache import RepositoryCache
from worker.git.changes import RunWorktree

BRANCH = "reqdrive/req-001"


def git(cwd: Path, *args: str) -> str:
    """Test-side git, independent of the steps under test."""
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


@pytest.fixture
def run_worktree(tmp_path: Path) -> RunWorktree:
    """A run's worktree on BRANCH, at a base commit holding app.py."""
    remote, clone = tmp_path / "remote.git", tmp_path / "clone"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    git(tmp_path, "clone", "-q", str(remote), str(clone))
    (clone / "app.py").write_text("VALUE = 1\n")
    git(clone, "add", "-A")
    git(clone, "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-qm", "base")
    git(clone, "push", "-q", "origin", "HEAD:main")
    cache = RepositoryCache(tmp_path / "cache", environment={"PATH": "/usr/bin:/bin"})
    worktree = cache.prepare(str(remote), branch=BRANCH, base_ref="main", run_id="run-1")
    return RunWorktree(cache, worktree, lambda: None)


def story_commit(run: RunWorktree) -> tuple[str, str]:
    """A story's change (code and its test) gathered and committed: (parent, commit)."""
    pre = run.head()
    (run.path / "app.py").write_text("VALUE = 2\n")
    (run.path / "tests").mkdir()
    (run.path / "tests" / "test_app.py").write_text("def test_value(): ...\n")
    assert run.gather(pre, []) == []
    return pre, run.commit("feat: [US-001] - Value two", "Reqdrive-Story: US-001")


def test_the_story_tests_run_on_the_parent_and_the_branch_comes_back_even_on_failure(
    run_worktree: RunWorktree,
) -> None:
    pre, commit = story_commit(run_worktree)
    path = run_worktree.path

    with pytest.raises(RuntimeError), run_worktree.parent_with(pre, commit, ["tests/test_app.py"]):
        # On the parent: the story's test is there, its code change is not.
        assert (path / "tests" / "test_app.py").exists()
        assert (path / "app.py").read_text() == "VALUE = 1\n"
        raise RuntimeError("a gate broke")

    assert git(path, "symbolic-ref", "HEAD") == f"refs/heads/{BRANCH}"
    assert run_worktree.head() == commit
    assert git(path, "status", "--porcelain") == ""


def test_a_resumed_run_reads_each_story_commit_by_its_trailer(run_worktree: RunWorktree) -> None:
    pre, commit = story_commit(run_worktree)

    assert run_worktree.trailers("Reqdrive-Story", pre, commit) == {commit: "US-001"}
    assert run_worktree.is_ancestor(pre, commit)
    assert not run_worktree.is_ancestor(commit, pre)
    assert run_worktree.remote_head() == ""  # never pushed
    assert run_worktree.push() == commit
    assert run_worktree.remote_head() == commit
