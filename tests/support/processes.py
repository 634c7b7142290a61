"""Whether a process the test started is still running."""

from __future__ import annotations

from pathlib import Path


def running(pid: int) -> bool:
    """Whether pid is a process that can still run (zombies waiting for a reaper don't)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    # The command name may hold spaces and parentheses; the state follows its last ")".
    return stat[stat.rfind(")") + 2] not in "ZX"
