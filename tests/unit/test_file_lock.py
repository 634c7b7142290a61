"""The one file lock: a second holder is refused by name, a dead holder's lock is free again."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from worker.confine.file_lock import FileLock
from worker.exceptions import FileLockHeld

ROOT = Path(__file__).resolve().parents[2]
HOLD_AND_WAIT = (
    "import sys, time; from pathlib import Path; from worker.confine.file_lock import FileLock; "
    "lock = FileLock(Path(sys.argv[1])); lock.acquire('pid of a killed holder'); time.sleep(300)"
)


def test_a_second_holder_is_refused_naming_the_first(tmp_path: Path) -> None:
    first, second = FileLock(tmp_path / "x.lock"), FileLock(tmp_path / "x.lock")
    first.acquire("the first holder")

    with pytest.raises(FileLockHeld) as refused:
        second.acquire("the second holder")

    assert refused.value.holder == "the first holder"
    first.release()
    second.acquire("the second holder")  # free once the first let go
    assert (tmp_path / "x.lock").read_text() == "the second holder\n"
    second.release()
    assert (tmp_path / "x.lock").read_text() == ""  # no stale holder for a reader to trust


def test_a_lock_removed_on_release_leaves_no_file_and_is_free_again(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / "run" / ".lock", remove_on_release=True)
    lock.acquire("123")
    assert (tmp_path / "run" / ".lock").read_text() == "123\n"

    lock.release()

    assert not (tmp_path / "run" / ".lock").exists()
    again = FileLock(tmp_path / "run" / ".lock", remove_on_release=True)
    again.acquire("456")
    again.release()


def test_the_lock_of_a_killed_holder_is_free_at_once(tmp_path: Path) -> None:
    path = tmp_path / "up.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_AND_WAIT, str(path)], cwd=ROOT)
    try:
        _wait_for(lambda: path.exists() and path.read_text() != "")
        with pytest.raises(FileLockHeld, match="pid of a killed holder"):
            FileLock(path).acquire("us")
    finally:
        holder.kill()
        holder.wait(timeout=30)

    lock = FileLock(path)
    lock.acquire("us")  # the kernel dropped the dead process's flock; its text is no obstacle
    assert path.read_text() == "us\n"
    lock.release()


def _wait_for(condition: Callable[[], bool]) -> None:
    """The child needs a moment to start Python (not a speed assertion)."""
    for _ in range(300):
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("the holder never took the lock")
