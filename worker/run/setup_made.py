"""What the repository's `setup` made: read by agent calls and checks, changed by neither.

After the setup, the worker keeps its folders (`setupCache`'s and the usual `.venv`,
`node_modules`) and every path git ignores then (a generated `_version.py`, an
`*.egg-info`, a `build/`) through every restore: they are the checks' environment. So an
agent call or a check that rewrote one would change every later check, unseen in the diff
(a generated module that patches the code under test, a `.pth`). In the sandbox they are
bound read-only; unconfined, they are fingerprinted before an agent call and compared after.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from worker.confine.safe_paths import LinkError, parent_of
from worker.model.repo_config import DEFAULT_SETUP_CACHE
from worker.run.context import RunContext

# Caches tools write beside the code (Python's bytecode, pytest's, mypy's, ruff's): no check
# reads them (a check's Python keeps its bytecode elsewhere: verdict/gates.py), and an honest
# agent that runs the tests writes them.
TOOL_CACHES = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})


def setup_folders(ctx: RunContext) -> list[str]:
    """The folders the repository's `setup` fills (none without one): `setupCache`'s and
    the usual ones, which the worker keeps out of git and every check runs with."""
    if not ctx.config.setup:
        return []
    return list(dict.fromkeys([*(ctx.config.setup_cache or {}), *DEFAULT_SETUP_CACHE]))


def setup_made(ctx: RunContext) -> list[str]:
    """The setup's folders and whatever else it left that the worker keeps for the checks,
    but the tools' caches."""
    kept = [path.rstrip("/") for path in ctx.git.kept]
    return [
        path
        for path in dict.fromkeys([*setup_folders(ctx), *kept])
        if path and Path(path).name not in TOOL_CACHES
    ]


def real_folder(root: Path, rel: str) -> bool:
    """Is root/rel a folder, reached without following any link?"""
    info = _real(root, rel)
    return info is not None and stat.S_ISDIR(info.st_mode)


def real_path(root: Path, rel: str) -> bool:
    """Is root/rel a folder or a file, reached without following any link?"""
    info = _real(root, rel)
    return info is not None and (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode))


def _real(root: Path, rel: str) -> os.stat_result | None:
    try:
        with parent_of(root, rel) as (folder, name):
            return os.stat(name, dir_fd=folder, follow_symlinks=False)
    except (LinkError, FileNotFoundError, NotADirectoryError, ValueError):
        return None


def state(ctx: RunContext, *, deep: bool) -> dict[str, tuple[int, ...] | None]:
    """What the setup made, each path's state: None when absent; when `deep` (no sandbox
    binds them read-only) a fingerprint of every entry's kind, size, inode and times."""
    worktree = ctx.git.path
    found: dict[str, tuple[int, ...] | None] = {}
    for name in setup_made(ctx):
        if not real_path(worktree, name):
            found[name] = None
        else:
            found[name] = _fingerprint(worktree / name) if deep else ()
    return found


def _fingerprint(path: Path) -> tuple[int, ...]:
    # ctime too: no one can set it back, as `touch` sets an edited file's mtime back.
    facts: list[int] = []
    entries = [(str(path.parent), path.name)]
    for where, dirs, files in os.walk(path, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in TOOL_CACHES)
        entries += [(where, entry) for entry in sorted((*dirs, *files))]
    for where, entry in entries:
        info = os.lstat(os.path.join(where, entry))
        facts.append(hash((where, entry)))
        facts += [info.st_mode, info.st_size, info.st_ino, info.st_mtime_ns, info.st_ctime_ns]
    return tuple(facts)
