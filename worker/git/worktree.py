"""A run's worktree: its own checkout on its own branch, reused, parked as a spare, leased."""

from __future__ import annotations

import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from worker.exceptions import GitError, WorkspaceError
from worker.git.runner import (
    COMMITTER_EMAIL,
    COMMITTER_NAME,
    Git,
    forget_worktree,
    head_sha,
    trust_worktree,
)

# Per-worktree ref (refs/worktree/* is private to one worktree): the remote head this run last
# saw or pushed. The shared refs/remotes/origin/* cannot be the lease: another run's fetch
# would move it to a human's push, and force-with-lease would then overwrite that push.
LEASE_REF = "refs/worktree/reqdrive-lease"


@dataclass(frozen=True)
class Worktree:
    """A run's checkout: its own folder on its own branch, sharing the mirror's objects."""

    path: Path
    branch: str
    base_ref: str
    base_sha: str
    resumed: bool
    # The checkout's own git folder in the mirror, from the mirror's records: the worker's
    # git names it explicitly and never follows the checkout's `.git` file.
    git_dir: Path | None = None
    remote_url: str = ""

    @property
    def mirror(self) -> Path | None:
        return None if self.git_dir is None else self.git_dir.parent.parent


@dataclass(frozen=True)
class AgentGitView:
    """What the sandbox binds so the agent's git works: its own git folder (writable), a
    `.git` file naming it (read-only, over the checkout's), the mirror's objects (read-only)."""

    git_dir: Path
    git_file: Path
    objects: Path


class Worktrees:
    """The per-run checkouts of one repository cache, all made and changed under its mirror's
    lock: built or reused for a run, parked as spares for the next one, trusted, leased."""

    def __init__(self, git: Git, spares_dir: Path, spares_per_mirror: int) -> None:
        self._git = git
        self.spares_dir = spares_dir
        self.spares_per_mirror = spares_per_mirror

    def checkout(self, mirror: Path, path: Path, branch: str, start: str) -> bool:
        """Reuse the run's worktree when it is intact and on `branch`, else build it afresh.

        A run resumed after a killed worker keeps its local commits (its checkpoint may name a
        commit that was not pushed yet); whatever the interrupted step left uncommitted is
        discarded, so the resumed step starts from a clean tree. Ignored files (dependency
        caches) are kept. Returns True when the checkout is new (or a spare), False if reused.
        """
        if path.exists() and self._is_worktree_on(mirror, path, branch):
            self._git(["reset", "--hard", "--quiet"], path)
            self._git(["clean", "-ffd", "--quiet"], path)
            return False
        self.drop(mirror, path)
        self._check_branch_free(mirror, branch)
        if not self._take_spare(mirror, path, branch, start):
            self._git(["worktree", "add", "--quiet", "-B", branch, str(path), start], mirror)
            self.trust(mirror, path)
        return True

    def release(self, mirror: Path, worktree: Worktree) -> None:
        """Park the run's checkout as a spare when there is room, else remove it; delete the
        run's local branch (the pushed one stays)."""
        if not self.park(mirror, worktree.path):
            self.drop(mirror, worktree.path)
        self._git(["branch", "-D", "--", worktree.branch], mirror, check=False)

    def _admin_dir(self, mirror: Path, path: Path) -> Path | None:
        """The checkout's git folder in the mirror, found from the mirror's own records (each
        names its checkout in `gitdir`), never from the checkout's `.git` file."""
        target = str(path.absolute() / ".git")
        admin_root = mirror / "worktrees"
        for admin in sorted(admin_root.iterdir()) if admin_root.is_dir() else ():
            try:
                recorded = (admin / "gitdir").read_text(encoding="utf-8").strip()
            except OSError:
                continue
            if recorded == target:
                return admin
        return None

    def trust(self, mirror: Path, path: Path) -> Path:
        """Name the checkout's git folder for every later command, and put its `.git` file
        back as git wrote it (an unsandboxed agent may have pointed it elsewhere)."""
        admin = self._admin_dir(mirror, path)
        if admin is None:
            raise WorkspaceError(f"{path} is not a registered worktree of {mirror}")
        trust_worktree(path, admin, self._git.environment)
        git_file = path / ".git"
        if git_file.is_symlink() or git_file.is_dir():
            raise WorkspaceError(f"{git_file} was replaced; the worktree is rebuilt next time")
        git_file.write_text(f"gitdir: {admin}\n", encoding="utf-8")
        return admin

    def has_commit(self, path: Path, sha: str) -> bool:
        """Whether `sha` is HEAD or one of its ancestors in the checkout at `path`."""
        # merge-base prints the commit itself exactly when it is an ancestor of HEAD.
        return self._git(["merge-base", sha, "HEAD"], path, check=False) == sha

    def lease(self, path: Path) -> str | None:
        sha = self._git(["rev-parse", "--verify", "--quiet", LEASE_REF], path, check=False)
        return sha or None

    def set_lease(self, path: Path, sha: str | None) -> None:
        if sha is None:
            self._git(["update-ref", "-d", LEASE_REF], path)
        else:
            self._git(["update-ref", LEASE_REF, sha], path)

    def park(self, mirror: Path, path: Path) -> bool:
        """Keep a finished run's checkout, detached and clean, as a spare; False if not kept."""
        spares = self.spares_of(mirror)
        kept = list(spares.iterdir()) if spares.exists() else []
        if not path.exists() or len(kept) >= self.spares_per_mirror:
            return False
        try:
            self.trust(mirror, path)
            # Detaching frees the run's branch; --force drops what the run left uncommitted, and
            # -x too: nothing a run built or ignored may leak into the next one.
            self._git(["checkout", "--quiet", "--force", "--detach"], path)
            self._git(["clean", "-ffdxq"], path)
            spares.mkdir(parents=True, exist_ok=True)
            target = spares / f"{path.name}-{uuid.uuid4().hex[:8]}"
            self._git(["worktree", "move", str(path), str(target)], mirror)
        except (GitError, WorkspaceError):
            return False
        finally:
            forget_worktree(path)
        return True

    def _take_spare(self, mirror: Path, path: Path, branch: str, start: str) -> bool:
        """Move a spare checkout to `path` and switch it to `branch` at `start`."""
        spares = self.spares_of(mirror)
        if self.spares_per_mirror < 1 or not spares.exists():
            return False
        for spare in sorted(spares.iterdir()):
            try:
                self._git(["worktree", "move", str(spare), str(path)], mirror)
            except GitError:
                self.drop(mirror, spare)  # not a worktree of this mirror any more
                continue
            try:
                self.trust(mirror, path)
                # No clean here: the spare was cleaned (-x too) when it was parked, under this
                # lock; agents never see the spares (the sandbox binds only their own checkout).
                self._git(["checkout", "--quiet", "--force", "-B", branch, start], path)
            except (GitError, WorkspaceError):
                self.drop(mirror, path)
                return False
            return True
        return False

    def spares_of(self, mirror: Path) -> Path:
        return self.spares_dir / mirror.name.removesuffix(".git")

    def _is_worktree_on(self, mirror: Path, path: Path, branch: str) -> bool:
        try:
            self.trust(mirror, path)
            current = self._git(["symbolic-ref", "--quiet", "HEAD"], path)
        except (GitError, WorkspaceError):
            forget_worktree(path)
            return False
        return current == f"refs/heads/{branch}"

    def drop(self, mirror: Path, path: Path) -> None:
        forget_worktree(path)
        if path.exists():
            self._git(["worktree", "remove", "--force", "--force", str(path)], mirror, check=False)
            shutil.rmtree(path, ignore_errors=True)  # not a registered worktree, or half-made
        self._git(["worktree", "prune"], mirror)

    def drop_spares_of(self, mirror: Path, run_id: str) -> None:
        """Remove the spares parked from run `run_id`'s checkout (named `<run-id>-<8 hex>`)."""
        spares = self.spares_of(mirror)
        pattern = re.compile(re.escape(run_id) + r"-[0-9a-f]{8}")
        for spare in sorted(spares.iterdir()) if spares.is_dir() else ():
            if pattern.fullmatch(spare.name):
                self.drop(mirror, spare)

    def checkouts_on(self, mirror: Path, branch: str) -> list[Path]:
        """The checkouts of this mirror that have `branch` checked out."""
        listing = self._git(["worktree", "list", "--porcelain"], mirror)
        return [
            Path(block.splitlines()[0].removeprefix("worktree "))
            for block in listing.split("\n\n")
            if f"branch refs/heads/{branch}" in block.splitlines()
        ]

    def _check_branch_free(self, mirror: Path, branch: str) -> None:
        for where in self.checkouts_on(mirror, branch):
            raise WorkspaceError(f"branch {branch} is already checked out at {where}")

    def agent_view(self, worktree: Worktree, folder: Path) -> AgentGitView:
        """A git folder of the agent's own for one call, so its `git status/diff/add/commit`
        work in the sandbox while the mirror (config, hooks, refs, other runs' checkouts)
        stays out of reach: the run's branch at HEAD, the base branch, a copy of the index,
        and the mirror's objects borrowed read-only (alternates). What the agent commits
        there is dropped with the folder; the worker takes the change from the files."""
        mirror, admin = worktree.mirror, worktree.git_dir
        if mirror is None or admin is None:
            raise WorkspaceError(f"{worktree.path} has no known repository records")
        shutil.rmtree(folder, ignore_errors=True)  # never follows links the agent left
        git_dir = folder / "git"
        refs = {f"refs/heads/{worktree.branch}": head_sha(worktree.path)}
        base = f"refs/remotes/origin/{worktree.base_ref}"
        if self._git(["check-ref-format", "--normalize", base], admin, check=False) == base:
            refs[base] = worktree.base_sha  # a base given as a commit or an expression: skipped
        for ref, sha in refs.items():
            (git_dir / ref).parent.mkdir(parents=True, exist_ok=True)
            (git_dir / ref).write_text(f"{sha}\n", encoding="utf-8")
        (git_dir / "objects" / "info").mkdir(parents=True)
        (git_dir / "objects" / "info" / "alternates").write_text(f"{mirror / 'objects'}\n")
        (git_dir / "HEAD").write_text(f"ref: refs/heads/{worktree.branch}\n", encoding="utf-8")
        (git_dir / "config").write_text(
            "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
            f"[user]\n\tname = {COMMITTER_NAME}\n\temail = {COMMITTER_EMAIL}\n"
        )
        if (admin / "index").is_file():
            shutil.copyfile(admin / "index", git_dir / "index")
        git_file = folder / "dot-git"
        git_file.write_text(f"gitdir: {git_dir}\n", encoding="utf-8")
        return AgentGitView(git_dir=git_dir, git_file=git_file, objects=mirror / "objects")
