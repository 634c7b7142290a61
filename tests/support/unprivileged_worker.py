"""The worker's side of one sandboxed agent call, run as an ordinary user (not root): the
agent makes a setuid file and closes a folder to everyone; the worker sweeps and removes.

    python unprivileged_worker.py FOLDER   -> prints a JSON report on stdout
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from worker.confine.leftovers import sweep
from worker.confine.safe_paths import remove_tree
from worker.confine.sandbox import Sandbox

AGENT = (
    "id -u > uid.txt && echo written > change.txt && cp /bin/sh sh && chmod 6755 sh &&"
    ' mkdir -p "$HOME/closed/inner" && touch "$HOME/closed/inner/file" && mkfifo pipe &&'
    ' chmod 000 "$HOME/closed/inner" "$HOME/closed"'
)


def main(folder: Path) -> None:
    worktree, home = folder / "worktree", folder / "home"
    for path in (worktree, home):
        path.mkdir(parents=True)
    sandbox = Sandbox().bind(writable=[home])
    argv, env = sandbox.wrap(
        ["sh", "-ec", AGENT], cwd=worktree, env={"PATH": "/usr/bin:/bin", "HOME": str(home)}
    )
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    shell = worktree / "sh"
    owner = (worktree / "change.txt").stat().st_uid
    found = sweep([worktree, home])
    remove_tree(home)
    report = {
        "exit_code": done.returncode,
        "stderr": done.stderr,
        "uid_inside": (worktree / "uid.txt").read_text().strip(),
        "owner_outside": owner,
        "worker_uid": os.getuid(),
        "setuid_left": bool(shell.stat().st_mode & (stat.S_ISUID | stat.S_ISGID)),
        "refused": found.refused,
        "home_left": home.exists(),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
