"""What a run leaves in the cache and on the remote: its checkout freed, its branch head kept."""

from __future__ import annotations

from collections.abc import Mapping

from worker.git.cache import RepositoryCache, check_remote_url
from worker.git.mirror import mirror_lock
from worker.git.runner import GitCredentials
from worker.git.worktree import Worktree
from worker.model.run_ids import check_run_id


def remote_refs(
    cache: RepositoryCache,
    remote_url: str,
    refs: list[str],
    credentials: GitCredentials | None = None,
) -> dict[str, str]:
    """Where the remote's `refs` (full names) are now; a ref it lacks is left out."""
    check_remote_url(remote_url)
    cache.cache_dir.mkdir(parents=True, exist_ok=True)
    out = cache.git(["ls-remote", "--", remote_url, *refs], cache.cache_dir, credentials)
    found = (line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    return {ref: sha for sha, ref in found if ref in refs}


def update_remote_refs(
    cache: RepositoryCache,
    remote_url: str,
    changes: Mapping[str, tuple[str | None, str | None]],
    credentials: GitCredentials | None = None,
) -> None:
    """Change the remote's refs in one atomic push: each from the commit it must be at now
    (None: wherever it is) to a new commit (None: deleted); refused when a ref moved."""
    mirror = cache.mirror_path(remote_url)
    with mirror_lock(mirror):
        cache.refresh_mirror(mirror, remote_url, credentials)  # the commits to push are here
        args = ["push", "--no-verify", "--atomic"]
        args += [f"--force-with-lease={ref}:{old}" for ref, (old, _) in changes.items() if old]
        specs = [f"+{new}:{ref}" if new else f":{ref}" for ref, (_, new) in changes.items()]
        cache.git([*args, "--", remote_url, *specs], mirror, credentials)
        cache.refresh_mirror(mirror, remote_url, credentials)  # --prune: tracking refs follow


def release_run(
    cache: RepositoryCache, remote_url: str, run_id: str, branch: str, *, keep: bool
) -> None:
    """Free what a run that is over left here, so another run can take its branch: its
    checkout (parked as a spare when `keep` and there is room, else removed, with the spares
    parked from it) and its local branch. The caller holds the run's lock."""
    path = cache.worktrees_dir / check_run_id(run_id)
    mirror = cache.mirror_path(remote_url)
    if not mirror.exists():
        return
    with mirror_lock(mirror):
        if keep:
            cache.worktrees.release(mirror, Worktree(path, branch, "", "", False))
        else:
            cache.worktrees.drop(mirror, path)
            cache.worktrees.drop_spares_of(mirror, run_id)
            if branch:  # a run that failed before it had a branch has none to delete
                cache.git(["branch", "-D", "--", branch], mirror, check=False)


def runs_on(cache: RepositoryCache, remote_url: str, branch: str) -> list[str]:
    """The runs whose checkout in this cache has `branch` checked out."""
    mirror = cache.mirror_path(remote_url)
    if not mirror.exists():
        return []
    with mirror_lock(mirror):
        found = cache.worktrees.checkouts_on(mirror, branch)
    return [path.name for path in found if path.parent == cache.worktrees_dir]
