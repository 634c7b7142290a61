"""Whether a process the test started is still running."""

from __future__ import annotations

import psutil


def running(pid: int) -> bool:
    """Whether pid is a process that can still run (zombies waiting for a reaper don't)."""
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False
