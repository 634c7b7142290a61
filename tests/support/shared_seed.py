"""The worker's bytecode of library modules for the checks, shared by every run the tests start
(in the test process, a deployed worker or a CLI run), as a deployed worker's runs share it:
each test has a work dir of its own, which would otherwise compile it anew for every test.

It lives in this checkout's gitignored `.cache/`, not in a shared temporary folder another
user of the machine could have made first and filled with bytecode of their own."""

from __future__ import annotations

import os
from pathlib import Path

SHARED_SEED = Path(__file__).resolve().parents[2] / ".cache" / "bytecode-seed"


def made_private() -> Path:
    """The shared seed's folder and the one it is in, made if missing and writable by this
    user alone, as the worker requires of a seed (confine/bytecode_seed.check_private),
    whatever the umask the checkout was made with."""
    for folder in (SHARED_SEED.parent, SHARED_SEED):
        folder.mkdir(exist_ok=True)
        os.chmod(folder, folder.stat().st_mode & 0o755)
    return SHARED_SEED
