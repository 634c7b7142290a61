"""A run's git steps on its worktree: the agent's change gathered, committed, undone, pushed."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from worker.git.cache import RepositoryCache
from worker.git.runner import GitCredentials, head_sha, run_git
from worker.git.scope import (
    clean_untracked,
    collect_changes,
    has_staged_changes,
    ignored_now,
    restore_tree,
)
from worker.git.worktree import AgentGitView, Worktree


@dataclass(frozen=True)
class RunWorktree:
    """The run's checkout in the repository cache, and every git step the run takes on it."""

    cache: RepositoryCache
    worktree: Worktree
    # Fresh credentials before every push (None: the remote needs none).
    credentials: Callable[[], GitCredentials | None]
    # The ignored paths the repository's setup made (its .venv, node_modules, a generated
    # version file): every clean keeps them, and removes every other ignored file.
    kept: list[str] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return self.worktree.path

    @property
    def branch(self) -> str:
        return self.worktree.branch

    def head(self) -> str:
        """The commit checked out now."""
        return head_sha(self.path)

    def secure(self) -> None:
        """After the agent or a gate ran, before any git of ours reads what it may have planted."""
        self.cache.secure(self.worktree)

    def agent_view(self, folder: Path) -> AgentGitView:
        """A git folder of the agent's own for one sandboxed call (see RepositoryCache)."""
        return self.cache.agent_view(self.worktree, folder)

    def restore(self, sha: str, *, ignored_too: bool = False) -> None:
        """The run's branch at `sha` with nothing else in the worktree (but what the setup
        made)."""
        restore_tree(self.path, self.branch, sha, ignored_too=ignored_too, keep=self.kept)

    def keep_setup(self, folders: list[str]) -> None:
        """What the setup left is the checks' environment from now on: these folders and
        every path git ignores now."""
        self.kept[:] = list(dict.fromkeys([*folders, *ignored_now(self.path)]))

    def clean_for_checks(self) -> None:
        """Before a check: no untracked or ignored file but the setup's, whoever left it (an
        agent call, or the code an earlier check ran: a module planted in an ignored folder
        that the next check would import). Tracked and staged files are left as they are."""
        clean_untracked(self.path, ignored_too=True, keep=self.kept)

    def gather(self, pre: str, forbidden: list[str]) -> list[str]:
        """The agent's work staged as one change on `pre`, forbidden paths reverted; those paths."""
        return collect_changes(self.path, self.branch, pre, forbidden)

    def has_change(self, pre: str) -> bool:
        """Is anything staged that `pre` does not have?"""
        return has_staged_changes(self.path, pre)

    def commit(self, subject: str, trailer: str) -> str:
        """Commit what is staged, as reqdrive and without hooks; the new commit."""
        self.cache.check_worktree(self.worktree)  # its own repository and branch, nothing else
        run_git(["commit", "--quiet", "--no-verify", "-m", subject, "-m", trailer], cwd=self.path)
        return self.head()

    def diff(self, old: str, new: str) -> str:
        """The patch from `old` to `new`."""
        return run_git(["diff", "--no-color", old, new], cwd=self.path)

    def drop_leftovers(self) -> None:
        """Whatever the gates wrote (caches, reports, a formatter's rewrites, a file ignored by
        git that the next check would read): not the story's. The setup's paths stay."""
        run_git(["reset", "--hard", "--quiet"], cwd=self.path)
        clean_untracked(self.path, ignored_too=True, keep=self.kept)

    @contextmanager
    def parent_with(self, parent: str, commit: str, files: Sequence[str]) -> Iterator[None]:
        """Inside: `parent` checked out (detached) with only these files of `commit` laid over
        it (those `commit` still has); after: the run's branch again, whatever happened."""
        present = set(
            run_git(["ls-tree", "-r", "--name-only", "-z", commit], cwd=self.path).split("\0")
        )
        kept = [f for f in files if f in present]
        run_git(["checkout", "--quiet", "--detach", parent], cwd=self.path)
        try:
            if kept:
                run_git(["checkout", "--quiet", commit, "--", *kept], cwd=self.path)
            yield
        finally:
            run_git(["checkout", "--quiet", "--force", self.branch], cwd=self.path)

    def has_commit(self, sha: str) -> bool:
        """Does the repository hold this commit (one made by a run on another machine may
        never have reached this cache)?"""
        found = run_git(
            ["rev-parse", "--verify", "--quiet", f"{sha}^{{commit}}"], cwd=self.path, check=False
        )
        return bool(found)

    def remote_head(self) -> str:
        """The remote branch's head as the cache last fetched it; "" when it has none yet."""
        # --verify --quiet: exit 1 and nothing printed when the remote has no such branch yet.
        ref = f"refs/remotes/origin/{self.branch}"
        return run_git(["rev-parse", "--verify", "--quiet", ref], cwd=self.path, check=False)

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        # merge-base prints the ancestor itself exactly when it is one (and nothing if either
        # commit is unknown here).
        merge_base = run_git(["merge-base", ancestor, descendant], cwd=self.path, check=False)
        return merge_base == ancestor

    def reset_to(self, sha: str) -> None:
        """The branch moved to `sha`, the worktree with it."""
        run_git(["reset", "--hard", "--quiet", sha], cwd=self.path)

    def trailers(self, key: str, old: str, new: str) -> dict[str, str]:
        """Each commit after `old` up to `new`, with its `key` trailer's value ("" if none)."""
        fmt = f"--format=%H %(trailers:key={key},valueonly,separator=%x2C)"
        listed = run_git(["log", fmt, f"{old}..{new}"], cwd=self.path, check=False)
        return {
            sha: value.strip()
            for sha, _, value in (line.partition(" ") for line in listed.splitlines() if line)
        }

    def push(self) -> str:
        """The branch's head pushed to the remote (with the lease the cache keeps); that head."""
        return self.cache.push(self.worktree, credentials=self.credentials())

    def remove(self) -> None:
        """The checkout handed back to the cache; the pushed branch is the record now."""
        self.cache.remove(self.worktree)
