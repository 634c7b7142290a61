"""One process at a time per file: an flock taken at once or refused, naming its holder."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from worker.exceptions import FileLockHeld


class FileLock:
    """An flock on `path`: taken at once, or refused with FileLockHeld naming whoever holds it.

    The kernel releases an flock when its holder dies however it dies, so a lock left by a
    killed process never blocks the next one. The holder writes who it is into the file, for
    the process it refuses to name. With `remove_on_release` the file goes when the lock is
    released (a folder then keeps only what it is for); otherwise it is emptied, so no reader
    trusts a stale holder.
    """

    def __init__(self, path: Path, *, remove_on_release: bool = False) -> None:
        self.path = path
        self.remove_on_release = remove_on_release
        self._handle: IO[str] | None = None

    def acquire(self, holder: str) -> None:
        """Take the lock and write `holder` into the file, or raise FileLockHeld."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            handle = self.path.open("a+")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                text = handle.read().strip()
                handle.close()
                raise FileLockHeld(self.path, text or "another process") from None
            if _is_at(handle, self.path):
                break
            handle.close()  # locked a file its holder removed meanwhile: lock the new one
        handle.seek(0)
        handle.truncate()
        handle.write(f"{holder}\n")
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        """Let the lock go; releasing a lock not held does nothing."""
        if self._handle is None:
            return
        if self.remove_on_release:
            self.path.unlink(missing_ok=True)  # before the unlock: nobody can lock it after
        else:
            self._handle.truncate(0)
        self._handle.close()  # closing the file drops the flock
        self._handle = None


def _is_at(handle: IO[str], path: Path) -> bool:
    """Whether the open file is still the one at `path` (not removed or replaced since)."""
    try:
        return path.stat().st_ino == os.fstat(handle.fileno()).st_ino
    except FileNotFoundError:
        return False
