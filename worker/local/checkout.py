"""The developer's checkout: its top folder and the branch checked out."""

from __future__ import annotations

import os
from pathlib import Path

from worker.exceptions import PreflightError
from worker.git.runner import run_git


def repo_root(cwd: Path) -> Path:
    """The top folder of the git checkout `cwd` is in."""
    root = run_git(["rev-parse", "--show-toplevel"], cwd=cwd, environment=os.environ, check=False)
    if not root:
        raise PreflightError(f"{cwd} is not inside a git repository")
    return Path(root)


def current_branch(root: Path) -> str:
    branch = run_git(
        ["symbolic-ref", "--quiet", "--short", "HEAD"],
        cwd=root,
        environment=os.environ,
        check=False,
    )
    if not branch:
        raise PreflightError("HEAD is detached: pass --base BRANCH")
    return branch
