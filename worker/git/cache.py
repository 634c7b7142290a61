"""The repository cache: one bare mirror per remote, fetched (never re-cloned) under its lock."""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

from worker.exceptions import GitError, WorkspaceError
from worker.git.mirror import (
    BRANCH_REFSPEC,
    TAG_REFSPEC,
    clear_stale_git_locks,
    mirror_lock,
    mirror_name,
    write_mirror_config,
)
from worker.git.runner import (
    DEFAULT_TIMEOUT_S,
    Git,
    GitCredentials,
    forget_worktree,
    git_environment,
    head_sha,
    trusted_git_dir,
)
from worker.git.worktree import AgentGitView, Worktree, Worktrees
from worker.model.run_ids import check_run_id

log = logging.getLogger(__name__)

# Finished runs' checkouts kept per mirror for the next run: checking out a new commit in an
# existing worktree rewrites only the files that differ, where a new worktree writes them all.
DEFAULT_SPARES_PER_MIRROR = 2

SYMREF_RE = re.compile(r"^ref: refs/heads/(\S+)\tHEAD$", re.MULTILINE)
# Messages git prints when the local object store, not the network, is broken.
CORRUPTION_RE = re.compile(
    r"corrupt|bad object|missing (blob|tree|commit)|unable to read|not a git repository"
    r"|did not send all necessary objects|fatal: bad (config|tree)",
    re.IGNORECASE,
)


class RepositoryCache:
    """Bare mirrors under cache_dir/mirrors, one worktree per run under cache_dir/worktrees."""

    def __init__(
        self,
        cache_dir: Path,
        *,
        environment: Mapping[str, str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        spares_per_mirror: int = DEFAULT_SPARES_PER_MIRROR,
    ) -> None:
        self.cache_dir = cache_dir.resolve()
        # What git inherits for this cache's commands (proxies, CA files, the SSH agent, PATH),
        # from the environment its caller captured; None: nothing.
        self.environment = git_environment(environment or {})
        self.mirrors_dir = self.cache_dir / "mirrors"
        self.worktrees_dir = self.cache_dir / "worktrees"
        self.spares_dir = self.cache_dir / "spares"
        self.git = Git(self.environment, timeout_s)
        self.worktrees = Worktrees(self.git, self.spares_dir, spares_per_mirror)

    def mirror_path(self, remote_url: str) -> Path:
        return self.mirrors_dir / mirror_name(remote_url)

    def prepare(
        self,
        remote_url: str,
        *,
        branch: str,
        base_ref: str | None,
        run_id: str,
        credentials: GitCredentials | None = None,
    ) -> Worktree:
        """Fetch the mirror (creating it once) and give the run its worktree on `branch`."""
        check_remote_url(remote_url)
        check_run_id(run_id)
        self._check_branch(branch)
        mirror = self.mirror_path(remote_url)
        path = self.worktrees_dir / run_id
        self.worktrees_dir.mkdir(parents=True, exist_ok=True)
        attempt = partial(
            self._fetch_and_checkout, mirror, path, remote_url, branch, base_ref, credentials
        )
        with mirror_lock(mirror):
            self._ensure_mirror(mirror, remote_url)
            clear_stale_git_locks(mirror, branch, run_id)
            try:
                worktree = attempt()
            except GitError as error:
                # A fetch can succeed on a store with missing objects (it trusts its refs), so
                # corruption often shows only at checkout; either way, start the mirror over.
                if not CORRUPTION_RE.search(error.stderr):
                    raise
                worktree = self._retry_after_recreate(mirror, remote_url, error, attempt)
        log.info(
            "worktree ready",
            extra={"run_id": run_id, "branch": branch, "resumed": worktree.resumed},
        )
        return worktree

    def _retry_after_recreate(
        self, mirror: Path, remote_url: str, corruption: GitError, attempt: Callable[[], Worktree]
    ) -> Worktree:
        reason = corruption.stderr.strip()[-300:]
        self._recreate_mirror(mirror, remote_url, reason)
        try:
            return attempt()
        except GitError as error:
            raise WorkspaceError(
                f"the repository cache for {remote_url} was corrupt ({reason}); it was "
                f"re-created, but preparing the worktree still failed: {error}"
            ) from error

    def _fetch_and_checkout(
        self,
        mirror: Path,
        path: Path,
        remote_url: str,
        branch: str,
        base_ref: str | None,
        credentials: GitCredentials | None,
    ) -> Worktree:
        self._fetch(mirror, remote_url, credentials)
        base_name, base_sha = self._resolve_base(mirror, remote_url, base_ref, credentials)
        remote_head = self._remote_branch_sha(mirror, branch)
        fresh = self.worktrees.checkout(mirror, path, branch, remote_head or base_sha)
        # A reused checkout's lease lags when its worker was killed after a push landed but
        # before it recorded it; a remote head already in the checkout's history is that push
        # (a push by anyone else is not in it, and stays refused).
        if fresh or (remote_head is not None and self.worktrees.has_commit(path, remote_head)):
            self.worktrees.set_lease(path, remote_head)
        git_dir = trusted_git_dir(path)  # checkout() trusted it
        resumed = remote_head is not None
        return Worktree(
            path, branch, base_name, base_sha, resumed, git_dir=git_dir, remote_url=remote_url
        )

    def secure(self, worktree: Worktree) -> None:
        """After the agent or a gate ran: the checkout's `.git` file and its repository's
        config back as reqdrive wrote them, so nothing they planted reaches the worker's git
        (unsandboxed they could write both); WorkspaceError if the mirror's records changed."""
        mirror, path = worktree.mirror, worktree.path
        if mirror is None or mirror.parent != self.mirrors_dir:
            raise WorkspaceError(f"{path} is not a worktree of this repository cache")
        if mirror_name(worktree.remote_url) != mirror.name:
            raise WorkspaceError(f"{path} does not belong to {worktree.remote_url}")
        with mirror_lock(mirror):
            if self.worktrees.trust(mirror, path) != worktree.git_dir:
                raise WorkspaceError(f"the repository records of {path} changed; refusing to go on")
            write_mirror_config(mirror, worktree.remote_url)

    def agent_view(self, worktree: Worktree, folder: Path) -> AgentGitView:
        """The agent's own git folder for one call (Worktrees.agent_view)."""
        return self.worktrees.agent_view(worktree, folder)

    def check_worktree(self, worktree: Worktree) -> None:
        """Before a commit or push: the checkout is this cache's, on the run's branch, and its
        repository's config is the one reqdrive wrote; WorkspaceError if anything else."""
        self.secure(worktree)
        path = worktree.path
        head = self.git(["symbolic-ref", "--quiet", "HEAD"], path, check=False)
        if head != f"refs/heads/{worktree.branch}":
            raise WorkspaceError(
                f"{path} is on {head or 'a detached HEAD'}, not on the run's branch "
                f"{worktree.branch}; refusing to commit or push"
            )

    def push(
        self,
        worktree: Worktree,
        *,
        credentials: GitCredentials | None = None,
        force_with_lease: bool = True,
    ) -> str:
        """Push the worktree's HEAD to its branch; the lease is the remote head we last saw."""
        mirror = self._mirror_of(worktree)
        remote_url = self._verified_remote_url(mirror)
        ref = f"refs/heads/{worktree.branch}"
        if worktree.git_dir is not None:
            self.check_worktree(worktree)
        with mirror_lock(mirror):
            sha = head_sha(worktree.path)
            write_mirror_config(mirror, remote_url)
            args = ["push", "--no-verify"]
            if force_with_lease:
                known = self.worktrees.lease(worktree.path) or ""
                # An empty expectation means "the branch must not exist yet" to git.
                args.append(f"--force-with-lease={ref}:{known}")
            args += ["--", remote_url, f"{sha}:{ref}"]
            self.git(args, mirror, credentials)
            # Pushing to a URL (not a remote name) leaves the tracking ref alone.
            self.git(["update-ref", f"refs/remotes/origin/{worktree.branch}", sha], mirror)
            self.worktrees.set_lease(worktree.path, sha)
        return sha

    def remove(self, worktree: Worktree) -> None:
        """Take the run's worktree away and delete its local branch (the pushed one stays).

        The checkout is cleaned and kept as a spare for the next run when there is room,
        otherwise removed with `git worktree remove --force` and pruned. Removing a worktree
        that is already gone does nothing (its stale branch is reset by the next prepare).
        """
        if not worktree.path.exists():
            forget_worktree(worktree.path)
            return
        mirror = self._mirror_of(worktree)
        with mirror_lock(mirror):
            self.worktrees.release(mirror, worktree)

    def refresh_mirror(
        self, mirror: Path, remote_url: str, credentials: GitCredentials | None
    ) -> None:
        """The mirror made if missing or broken, then fetched; the caller holds its lock."""
        self._ensure_mirror(mirror, remote_url)
        self._fetch(mirror, remote_url, credentials)

    # mirror -----------------------------------------------------------------------------

    def _ensure_mirror(self, mirror: Path, remote_url: str) -> None:
        problem = self._mirror_problem(mirror)
        if problem == "missing":
            self._create_mirror(mirror, remote_url)
        elif problem:
            self._recreate_mirror(mirror, remote_url, problem)
        else:
            write_mirror_config(mirror, remote_url)

    def _mirror_problem(self, mirror: Path) -> str:
        """Empty when the mirror is usable; otherwise why not ("missing" when absent).

        A changed config is no problem: write_mirror_config puts it back.
        """
        if not mirror.exists():
            return "missing"
        try:
            # --git-dir: without it git would look upwards and judge an enclosing repository.
            is_bare = self.git([f"--git-dir={mirror}", "rev-parse", "--is-bare-repository"], mirror)
        except GitError as error:
            return error.stderr.strip()[-300:] or "not a git repository"
        return "" if is_bare == "true" else "not a bare repository"

    def _create_mirror(self, mirror: Path, remote_url: str) -> None:
        # init + fetch with explicit refspecs instead of `clone --mirror`: a mirror refspec
        # (refs/*:refs/*) with --prune would delete the runs' local branches, and fetch refuses
        # to update a branch some worktree has checked out.
        mirror.parent.mkdir(parents=True, exist_ok=True)
        self.git(["init", "--bare", "--quiet", str(mirror)], mirror.parent)
        write_mirror_config(mirror, remote_url)

    def _recreate_mirror(self, mirror: Path, remote_url: str, reason: str) -> None:
        log.warning("mirror corrupt, re-creating", extra={"mirror": str(mirror), "reason": reason})
        shutil.rmtree(mirror, ignore_errors=True)
        # The spares borrow the old mirror's objects: they go with it.
        shutil.rmtree(self.worktrees.spares_of(mirror), ignore_errors=True)
        if mirror.exists():
            raise WorkspaceError(
                f"the repository cache {mirror} is corrupt ({reason}) and could not be removed"
            )
        self._create_mirror(mirror, remote_url)

    def _fetch(self, mirror: Path, remote_url: str, credentials: GitCredentials | None) -> None:
        # The URL and refspecs are given explicitly so a changed mirror config cannot redirect
        # the fetch (or the token) elsewhere.
        args = ["fetch", "--prune", "--quiet", "--", remote_url, BRANCH_REFSPEC, TAG_REFSPEC]
        self.git(args, mirror, credentials)

    def _resolve_base(
        self,
        mirror: Path,
        remote_url: str,
        base_ref: str | None,
        credentials: GitCredentials | None,
    ) -> tuple[str, str]:
        name = base_ref or self._default_branch(mirror, remote_url, credentials)
        name = name.removeprefix("refs/heads/")
        for candidate in (f"refs/remotes/origin/{name}", f"refs/tags/{name}", name):
            sha = self.git(
                ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{candidate}^{{commit}}"],
                mirror,
                check=False,
            )
            if sha:
                return name, sha
        raise WorkspaceError(f"base ref {name!r} does not exist on {remote_url}")

    def _default_branch(
        self, mirror: Path, remote_url: str, credentials: GitCredentials | None
    ) -> str:
        # fetch does not record the remote's HEAD (before git 2.48), so ask for it; the default
        # branch can be renamed, so it is not cached.
        out = self.git(["ls-remote", "--symref", "--", remote_url, "HEAD"], mirror, credentials)
        match = SYMREF_RE.search(out)
        if match is None:
            raise WorkspaceError(f"{remote_url} has no default branch (is it empty?)")
        return match.group(1)

    def _remote_branch_sha(self, mirror: Path, branch: str) -> str | None:
        ref = f"refs/remotes/origin/{branch}"
        sha = self.git(["rev-parse", "--verify", "--quiet", ref], mirror, check=False)
        return sha or None

    # helpers ----------------------------------------------------------------------------

    def _check_branch(self, branch: str) -> None:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        ok = self.git(["check-ref-format", "--branch", branch], self.cache_dir, check=False)
        if ok != branch or branch.startswith("-"):
            raise WorkspaceError(f"{branch!r} is not a valid branch name")

    def _mirror_of(self, worktree: Worktree) -> Path:
        """The mirror a worktree belongs to, refusing one outside this cache."""
        mirror = worktree.mirror
        if mirror is None:  # a Worktree made by hand: ask git, through the checkout
            path = worktree.path
            common = self.git(["rev-parse", "--path-format=absolute", "--git-common-dir"], path)
            mirror = Path(common).resolve()
        if mirror.parent != self.mirrors_dir.resolve():
            raise WorkspaceError(f"{worktree.path} is not a worktree of this repository cache")
        return mirror

    def _verified_remote_url(self, mirror: Path) -> str:
        # The mirror's config is writable from the worktree; its name is the URL's hash, so a
        # changed URL (one that would receive the token) is caught here.
        url = self.git(["config", "--get", "remote.origin.url"], mirror, check=False)
        if not url or mirror_name(url) != mirror.name:
            raise WorkspaceError(f"the origin URL of {mirror} was changed; refusing to push")
        return url


def check_remote_url(remote_url: str) -> None:
    parts = urlsplit(remote_url)
    if parts.scheme and (parts.username or parts.password):  # first: the message hides them
        raise WorkspaceError("credentials must not be part of the remote URL")
    if not remote_url or remote_url.startswith("-") or not remote_url.isprintable():
        raise WorkspaceError(f"{remote_url!r} is not a repository URL")
