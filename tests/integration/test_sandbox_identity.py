"""The agent is an ordinary user in its sandbox whoever runs the worker, and what it leaves is
the worker's own to sweep and remove, as root and as an ordinary user."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.unprivileged_worker import AGENT
from worker.confine.leftovers import sweep
from worker.confine.safe_paths import remove_tree
from worker.confine.sandbox import SANDBOX_UID, Sandbox

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

ROOT = Path(__file__).resolve().parents[2]
WORKER_SCRIPT = ROOT / "tests" / "support" / "unprivileged_worker.py"
# An ordinary user of the machine and a system Python it can run (the test's own interpreter
# may live where that user cannot read, /root/.pyenv here).
ORDINARY_UID = 1000
SYSTEM_PYTHON = Path("/usr/bin/python3")


def others_can_enter(path: Path) -> bool:
    """Can an ordinary user reach `path` (every folder on the way open to others)?"""
    return all(os.stat(p).st_mode & 0o001 for p in [path, *path.parents])


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder the ordinary user owns (pytest's tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="reqdrive-identity-"))
    if os.getuid() == 0:
        os.chown(folder, ORDINARY_UID, ORDINARY_UID)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_as_this_worker_the_agent_is_uid_1000_and_leaves_nothing_privileged(
    tmp_path: Path,
) -> None:
    worktree, home = tmp_path / "worktree", tmp_path / "home"
    for path in (worktree, home):
        path.mkdir()
    argv, env = (
        Sandbox(bwrap=shutil.which("bwrap") or "bwrap")
        .bind(writable=[home])
        .wrap(["sh", "-ec", AGENT], cwd=worktree, env={"PATH": "/usr/bin:/bin", "HOME": str(home)})
    )
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert (worktree / "uid.txt").read_text().strip() == str(SANDBOX_UID)
    assert (worktree / "change.txt").stat().st_uid == os.getuid()  # the worker's own file
    found = sweep([worktree, home])
    assert not (worktree / "sh").stat().st_mode & 0o6000
    assert found.refused == ["pipe (FIFO)"]
    remove_tree(home)
    assert not home.exists()


@pytest.mark.skipif(
    os.getuid() != 0
    or shutil.which("setpriv") is None
    or not SYSTEM_PYTHON.exists()
    or not others_can_enter(ROOT)
    or not others_can_enter(Path(sysconfig.get_paths()["purelib"])),
    reason="needs root to start a worker as an ordinary user",
)
def test_as_an_ordinary_user_the_worker_sweeps_and_removes_what_the_agent_closed(
    shared_folder: Path,
) -> None:
    user = [f"--reuid={ORDINARY_UID}", f"--regid={ORDINARY_UID}", "--clear-groups"]
    done = subprocess.run(
        ["setpriv", *user, str(SYSTEM_PYTHON), str(WORKER_SCRIPT), str(shared_folder)],
        # The engine's dependencies (psutil) from this interpreter's site-packages: the system
        # Python is the same minor version, and the venv's own python lives under /root.
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{ROOT}:{sysconfig.get_paths()['purelib']}"},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["exit_code"] == 0, report["stderr"]
    assert report["worker_uid"] == ORDINARY_UID
    assert report["uid_inside"] == str(SANDBOX_UID)
    assert report["owner_outside"] == ORDINARY_UID  # writable to the worker, no chown needed
    assert report["setuid_left"] is False
    assert report["refused"] == ["pipe (FIFO)"]
    assert report["home_left"] is False
