"""The worker's bytecode of library modules for the checks, shared by every run the tests start
(in the test process, a deployed worker or a CLI run), as a deployed worker's runs share it:
each test has a work dir of its own, which would otherwise compile it anew for every test."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

SHARED_SEED = Path(tempfile.gettempdir()) / f"reqdrive-tests-bytecode-seed-{os.getuid()}"
