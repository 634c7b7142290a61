"""What the agent leaves behind made harmless: no setuid/setgid bit, no FIFO, socket or device."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from worker.confine.safe_paths import Entry, set_mode_at, walk_folders

LOG = logging.getLogger(__name__)

# The bits that hand the file's owner or group to whoever runs it. Files the agent makes are
# the worker's own outside the sandbox (root's, when the worker is root): a setuid bit left on
# one would give any local user the worker's identity.
PRIVILEGE_BITS = stat.S_ISUID | stat.S_ISGID
# Files nothing in a repository needs, which a reader would block on (a FIFO), talk to (a
# socket) or reach hardware through (a device: the sandbox cannot make one, refused anyway).
SPECIAL_KINDS = {
    stat.S_IFIFO: "FIFO",
    stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
}
NOTE_NAMES = 10


@dataclass
class Leftovers:
    """What a sweep changed: special files removed (refused) and files whose bits it cleared."""

    refused: list[str] = field(default_factory=list)
    unprivileged: list[str] = field(default_factory=list)

    def note(self) -> str | None:
        """One line for the run's progress, or None when there was nothing to do."""
        parts = []
        if self.refused:
            parts.append("removed special files: " + _names(self.refused))
        if self.unprivileged:
            parts.append("cleared setuid/setgid bits: " + _names(self.unprivileged))
        return "refused what the agent left: " + "; ".join(parts) if parts else None


def sweep(folders: Iterable[Path]) -> Leftovers:
    """Walk each folder (never through a link): clear setuid/setgid bits, remove FIFOs,
    sockets and devices, put the owner's bits back on folders. Run after every call and gate,
    when nothing of the agent's is running any more, before the worker reads or parks."""
    found = Leftovers()
    for root in folders:
        if not root.is_dir() or root.is_symlink():
            continue
        _unprivilege_root(root, found)
        for entry in walk_folders(root):
            _make_harmless(entry, found)
    if found.refused or found.unprivileged:
        LOG.warning(
            "agent leftovers made harmless",
            extra={"refused": found.refused[:50], "unprivileged": found.unprivileged[:50]},
        )
    return found


def _make_harmless(entry: Entry, found: Leftovers) -> None:
    mode = entry.info.st_mode
    kind = SPECIAL_KINDS.get(stat.S_IFMT(mode))
    if kind is not None:
        os.unlink(entry.name, dir_fd=entry.folder)
        found.refused.append(f"{entry.path} ({kind})")
    elif not stat.S_ISLNK(mode) and mode & PRIVILEGE_BITS:
        set_mode_at(entry.folder, entry.name, mode & ~PRIVILEGE_BITS)
        found.unprivileged.append(entry.path)


def _unprivilege_root(root: Path, found: Leftovers) -> None:
    """The folder itself: the agent owns the mount's top and may have set its bits too."""
    info = root.lstat()
    if info.st_mode & PRIVILEGE_BITS:
        os.chmod(root, stat.S_IMODE(info.st_mode) & ~PRIVILEGE_BITS)
        found.unprivileged.append(f"{root.name}/")


def _names(paths: list[str]) -> str:
    """The first few paths, control characters and undecodable bytes escaped: the agent chose
    the names, and the note is read in a terminal and in the next prompt."""
    shown = ", ".join(_printable(p) for p in paths[:NOTE_NAMES])
    return shown + (f" and {len(paths) - NOTE_NAMES} more" if len(paths) > NOTE_NAMES else "")


def _printable(path: str) -> str:
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in path)
