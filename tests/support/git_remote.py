"""Real git for the git package's tests: a bare remote with a human's clone, and a cache on it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from worker.git.cache import RepositoryCache
from worker.git.worktree import Worktree

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
