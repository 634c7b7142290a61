"""The run folder's artifacts, each written through the Redactor."""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from worker.confine.file_lock import FileLock
from worker.confine.redact import Redactor, redact_file
from worker.exceptions import FileLockHeld, PrdError, PreflightError

RUN_JSON = "run.json"
PRD_JSON = "prd.json"
PROGRESS = "progress.txt"
VERIFICATION_SUMMARY = "verification-summary.json"
CHANGES_PATCH = "changes.patch"
PR_BODY = "pr.md"
LOCK_FILE = ".lock"
# A file the agent hands over (prd.json) is read up to this size; a plan is a few KiB.
HANDOVER_MAX_BYTES = 4 * 1024 * 1024


def read_handed_over(path: Path, max_bytes: int = HANDOVER_MAX_BYTES) -> str:
    """The text of a file the agent wrote, never through a link it planted (which would make
    the worker read, as itself, a file the agent cannot) and never more than max_bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:  # ELOOP: a symbolic link
        raise PrdError(f"{path.name} cannot be read as a plain file: {error.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise PrdError(f"{path.name} is not a regular file")
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise PrdError(f"{path.name} is larger than {max_bytes} bytes")
    return data.decode("utf-8", errors="replace")


class RunFolder:
    """$REQDRIVE_WORK_DIR/runs/<run-id>/: what a person reads to see what a run did."""

    def __init__(self, path: Path, redactor: Redactor) -> None:
        self.path = path
        self.redactor = redactor
        self._swept_at = 0.0  # files unchanged since the last sweep need no second look
        path.mkdir(parents=True, exist_ok=True)

    def file(self, name: str) -> Path:
        return self.path / name

    def prompt_path(self, iteration: int | str) -> Path:
        return self.path / f"iteration-{iteration}.prompt.md"

    def log_path(self, iteration: int | str) -> Path:
        return self.path / f"iteration-{iteration}.log"

    def gates_label(self, iteration: int) -> str:
        return f"iteration-{iteration}"  # gates.run_gates writes <label>.gates.json

    def patch_path(self, iteration: int) -> Path:
        return self.path / f"iteration-{iteration}.patch"

    def write_text(self, name: str | Path, text: str) -> Path:
        path = self.path / name
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(self.redactor.redact(text))
        os.replace(tmp, path)  # readers (a watching test, `tail -f`) never see half a file
        return path

    def write_json(self, name: str, data: Any) -> Path:
        return self.write_text(name, json.dumps(data, indent=2, sort_keys=False) + "\n")

    def append_progress(self, text: str) -> None:
        with self.file(PROGRESS).open("a") as handle:
            handle.write(self.redactor.redact(text.rstrip("\n") + "\n"))

    def progress(self) -> str:
        path = self.file(PROGRESS)
        return path.read_text() if path.exists() else ""

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the run for this process: a second `reqdrive run` (or a duplicate job on this
        machine) with the same run id would clobber its worktree, checkpoint and logs.

        The lock file names the holder's pid (`reqdrive runs` reads it) and is removed when
        the run ends, so the folder holds only the run's artifacts.
        """
        lock = FileLock(self.path / LOCK_FILE, remove_on_release=True)
        try:
            lock.acquire(str(os.getpid()))
        except FileLockHeld as held:
            raise PreflightError(
                f"run {self.path.name} is already running (pid {held.holder})"
            ) from None
        try:
            yield
        finally:
            lock.release()

    def sweep(self, *, full: bool = False) -> None:
        """Redact the folder's files in place: the agent can write here, and what it writes
        must not keep a secret either. Between agent calls only files changed since the last
        sweep are read; `full` reads them all (at the end of a run, whatever their mtime)."""
        started = time.time()
        for path in self.path.rglob("*"):
            if not path.is_file() or path.is_symlink():
                continue
            info = path.stat()
            # A second of slack: coarse file system clocks must not hide a fresh write.
            since = 0.0 if full else self._swept_at - 1
            if info.st_mtime < since:
                continue
            # In chunks, whatever the size: a large file keeps no secret either.
            redact_file(path, self.redactor)
        self._swept_at = started
