"""One run per requirement at a time: the RunLock protocol and the file lock of local runs."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from worker.report.run_folder import RunFolder


class RunLock(Protocol):
    """Held for the whole run; entering refuses (RunLockHeld, a PreflightError) when someone
    else holds it. The App's lock, one any machine sees, is bot/stores/run_locks.py's."""

    def held(self) -> AbstractContextManager[None]: ...


class FileRunLock:
    """`reqdrive run` on one machine: the run folder's flock."""

    def __init__(self, folder: RunFolder) -> None:
        self.folder = folder

    def held(self) -> AbstractContextManager[None]:
        return self.folder.lock()
