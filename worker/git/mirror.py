"""A mirror's own files: its folder name, its lock, git locks a killed worker left, its config."""

from __future__ import annotations

import fcntl
import hashlib
import logging
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from worker.git.runner import COMMITTER_EMAIL, COMMITTER_NAME

log = logging.getLogger(__name__)

# What a mirror fetches: branches as remote-tracking refs (its runs' branches are its own), tags.
BRANCH_REFSPEC = "+refs/heads/*:refs/remotes/origin/*"
TAG_REFSPEC = "+refs/tags/*:refs/tags/*"
MIRROR_NAME_RE = re.compile(r"[^A-Za-z0-9._-]+")


def mirror_name(remote_url: str) -> str:
    """A readable, collision-free folder name for a remote's mirror."""
    parts = urlsplit(remote_url)
    readable = f"{parts.hostname or ''}{parts.path}" if parts.scheme else remote_url
    readable = MIRROR_NAME_RE.sub("_", readable.removesuffix(".git")).strip("._-")[-60:]
    digest = hashlib.sha256(remote_url.encode()).hexdigest()[:12]
    return f"{readable or 'repo'}-{digest}.git"


@contextmanager
def mirror_lock(mirror: Path) -> Iterator[None]:
    """Serialize fetches, worktree changes and pushes on one mirror, across processes.

    flock locks belong to the open file, so threads of one process exclude each other too.
    The lock file sits beside the mirror, so re-creating a corrupt mirror keeps it.
    """
    lock_path = mirror.with_name(mirror.name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def clear_stale_git_locks(mirror: Path, branch: str, run_id: str) -> None:
    """Remove the `.lock` files a killed worker's git left in what only lock holders write.

    git takes `<ref>.lock` files for every ref it updates and leaves them when it is killed
    (SIGKILL, the machine gone); the next fetch or commit then fails with "cannot lock ref".
    Fetches and pushes, the only writers of `refs/remotes/` and `packed-refs`, run under the
    mirror's flock, which the kernel released when the dead holder died: under it, such a lock
    is stale. The run's own branch and worktree are written only by the holder of the run's
    lock, which this process holds now. Locks of other runs' branches are left alone: their
    commits run beside us without the mirror's lock.
    """
    if not mirror.is_dir():
        return
    stale = [mirror / "packed-refs.lock", mirror / "refs" / "heads" / f"{branch}.lock"]
    stale += [mirror / "worktrees" / run_id / name for name in ("index.lock", "HEAD.lock")]
    remotes = mirror / "refs" / "remotes"
    stale += list(remotes.rglob("*.lock")) if remotes.is_dir() else []
    for path in stale:
        if path.is_file() and not path.is_symlink():
            path.unlink()
            where = str(path.relative_to(mirror))
            log.warning("stale git lock removed", extra={"run_id": run_id, "lock": where})


def write_mirror_config(mirror: Path, remote_url: str) -> None:
    """Give the mirror back the config reqdrive wrote, dropping whatever was added since.

    Every worktree can write this file, and keys nobody can cancel from the command line would
    take the next fetch's or push's token elsewhere (url.*.insteadOf, http.proxy with
    http.sslVerify off) or run a program at checkout (filter drivers, core.sshCommand).
    """
    quoted = remote_url.replace("\\", "\\\\").replace('"', '\\"')
    text = (
        "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n"
        f'[remote "origin"]\n\turl = "{quoted}"\n\tfetch = {BRANCH_REFSPEC}\n'
        f"[user]\n\tname = {COMMITTER_NAME}\n\temail = {COMMITTER_EMAIL}\n"
    )
    staged = mirror / f"config.{uuid.uuid4().hex[:8]}"
    staged.write_text(text, encoding="utf-8")
    staged.replace(mirror / "config")  # atomic: a concurrent git reads the old or the new one
