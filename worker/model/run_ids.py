"""The one rule for run ids, shared by `run`, `plan`, `status`, `logs` and the workspace."""

from __future__ import annotations

import re

from worker.exceptions import PreflightError

# A run id names a folder under the work dir (runs/<id>, worktrees/<id>, homes/<id>): one path
# component, ASCII, never "." or "..", never starting with "-" (it would read as an option).
RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", re.ASCII)
RUN_ID_RULE = (
    "use 1 to 128 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit "
    "and without '..'"
)


def check_run_id(run_id: str) -> str:
    """The run id itself, or PreflightError naming the rule; checked before any file is made."""
    if not RUN_ID_RE.fullmatch(run_id) or ".." in run_id:
        shown = repr(run_id[:60]) + ("..." if len(run_id) > 60 else "")
        raise PreflightError(f"run id {shown} is not valid: {RUN_ID_RULE}")
    return run_id
