"""Disk bounds of a run: free space before it and each attempt, its folders' size after a call."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path

from worker.confine.limits import MIB, ResourceLimits
from worker.exceptions import PreflightError


class LowDiskSpace(PreflightError):
    """The disk holding the work dir has less free space than a run or an attempt needs."""


def check_free_space(work_dir: Path, limits: ResourceLimits) -> None:
    """Raise LowDiskSpace, saying how much is free and what to set, when the disk holding
    work_dir has less than REQDRIVE_DISK_FREE_MIB free: a run that fills the disk ends with
    a traceback half-way through a write, and leaves the disk full for every other run."""
    free = shutil.disk_usage(_existing(work_dir)).free
    needed = limits.disk_free_mib * MIB
    if free < needed:
        raise LowDiskSpace(
            f"only {free // MIB} MiB free on the disk holding {work_dir}; a run and each "
            f"attempt need {limits.disk_free_mib} MiB (REQDRIVE_DISK_FREE_MIB): free some "
            "space, or set REQDRIVE_DISK_FREE_MIB lower"
        )


def over_quota(
    folders: Iterable[Path], limits: ResourceLimits, *, skip: Iterable[Path] = ()
) -> str | None:
    """Why the run's folders are over REQDRIVE_DISK_QUOTA_MIB together, or None. Counted
    without following links, each file once (hard links), by the blocks it takes, leaving
    out the paths in `skip` (what the setup installed); the count stops at the quota, so a
    call that wrote a million files costs no more than the quota."""
    quota = limits.disk_quota_mib * MIB
    if folders_size(folders, stop_at=quota, skip=skip) <= quota:
        return None
    return (
        f"the run's folders took more than {limits.disk_quota_mib} MiB "
        "(REQDRIVE_DISK_QUOTA_MIB) after this call; what it wrote was removed"
    )


def folders_size(
    folders: Iterable[Path], *, stop_at: int | None = None, skip: Iterable[Path] = ()
) -> int:
    """Bytes on disk under these folders (links not followed, `skip`'s paths left out), or
    a number past stop_at."""
    skipped = {os.path.normpath(p) for p in skip}
    seen: set[tuple[int, int]] = set()
    total = 0
    pending = list(folders)
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in entries:
            if os.path.normpath(entry.path) in skipped:
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if (info.st_dev, info.st_ino) in seen:
                continue
            seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512
            if stat.S_ISDIR(info.st_mode):
                pending.append(Path(entry.path))
        if stop_at is not None and total > stop_at:
            break
    return total


def empty_folders(folders: Iterable[Path]) -> None:
    """Remove everything inside these folders (links removed, never followed); keep them."""
    for folder in folders:
        if folder.is_symlink():
            folder.unlink()
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)


def _existing(path: Path) -> Path:
    """The path, or its nearest folder that exists (the work dir may not be made yet)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")
