"""`reqdrive up` reaps the orphans it adopts as their subreaper, instead of keeping zombies."""

from __future__ import annotations

import subprocess
import sys

# In a process of its own: becoming a subreaper is for the rest of a process's life.
ADOPT_AND_REAP = """
import subprocess, time
import psutil
from bot.ops.stack import _adopt_orphans, _reap_adopted

_adopt_orphans()
# A parent that exits at once, leaving its child to us: the shape of bwrap's or a killed
# horse's processes under `up`.
subprocess.run(["sh", "-c", "sleep 0.2 & exit 0"], check=True)
def zombies():
    return [p.pid for p in psutil.Process().children() if p.status() == psutil.STATUS_ZOMBIE]
deadline = time.monotonic() + 30
while not zombies() and time.monotonic() < deadline:
    time.sleep(0.05)
print(len(zombies()), flush=True)
_reap_adopted(own=set())
print(len(zombies()), flush=True)
"""


def test_an_adopted_orphan_that_ended_is_reaped_not_left_a_zombie() -> None:
    result = subprocess.run(
        [sys.executable, "-c", ADOPT_AND_REAP], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "0"]  # one zombie adopted, then none
