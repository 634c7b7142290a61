"""Baselines kept across runs: a base commit's gate results, by its tree and how they ran."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from worker.git.runner import run_git
from worker.model.gates import GateResult
from worker.run.context import RunContext
from worker.verdict import gates as gates_module

log = logging.getLogger(__name__)

FORMAT = 1  # of an entry; a change makes every older entry miss
ENTRY_MAX_BYTES = 16 * 1024 * 1024  # an entry larger than this is neither saved nor read
ENTRIES_KEPT = 64  # the oldest beyond these are removed after each save
# Per-run paths in the gates' environment: the same run elsewhere has others.
RUN_PATHS = frozenset({"HOME", "TMPDIR"})
# What the setup installed, as its packages' own records say it (name, version, where from):
# Python's distribution metadata and path files, npm's package records. Their content,
# with the worktree's path (new every run: editable installs hold it) left out.
MANIFEST_NAMES = frozenset(
    {
        "METADATA",
        "PKG-INFO",
        "direct_url.json",
        "entry_points.txt",
        "pyvenv.cfg",
        "package.json",
        ".package-lock.json",
        ".modules.yaml",
        ".yarn-integrity",
    }
)
MANIFEST_SUFFIXES = (".pth", ".egg-link")
MANIFEST_MAX_BYTES = 1 << 20  # a larger one counts by its size alone
GATES = TypeAdapter(list[GateResult])
VERDICT_CODE = Path(gates_module.__file__).parent  # worker/verdict: gates and collectors


@dataclass(frozen=True)
class CachedBaseline:
    gates: list[GateResult]
    measured_by: str  # the run that measured them


def baseline_key(ctx: RunContext, sha: str) -> str:
    """What decides a baseline's results: the commit's tree, the gates' commands, the whole
    repository config (its setup included), the gates' environment and tools, the sandbox
    and the limits they ran under, and this reqdrive. Any difference is another key."""
    tree = run_git(["rev-parse", "--verify", f"{sha}^{{tree}}"], cwd=ctx.git.path)
    sandbox = ctx.spec.sandbox
    parts = {
        "format": FORMAT,
        "reqdrive": _version(),
        "collectors": _collectors(),
        "tree": tree,
        "gates": [g.model_dump(mode="json") for g in ctx.gates],
        "config": ctx.config.model_dump(mode="json"),
        "env": {k: v for k, v in sorted(ctx.gate_env.items()) if k not in RUN_PATHS},
        "toolchains": [str(p) for p in ctx.toolchains.folders],
        "sandbox": "off" if sandbox is None else [str(sandbox.network), repr(sandbox.limits)],
        "limits": repr(asdict(ctx.spec.limits)),
        "installed": installed_identity(ctx.git.path, ctx.git.kept),
    }
    encoded = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(encoded).hexdigest()


class BaselineCache:
    """One JSON file per key under `folder` (the work dir's, never the agent's), replaced
    atomically; an entry that cannot be read is removed and measured again."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def load(self, key: str) -> CachedBaseline | None:
        path = self.folder / f"{key}.json"
        try:
            if path.stat().st_size > ENTRY_MAX_BYTES:
                raise ValueError("too large")
            data = json.loads(path.read_bytes())
            if data.get("format") != FORMAT or data.get("key") != key:
                raise ValueError("another format or key")
            return CachedBaseline(GATES.validate_python(data["gates"]), str(data["measured_by"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, ValidationError):
            log.warning("unreadable baseline cache entry removed", extra={"key": key})
            with contextlib.suppress(OSError):
                path.unlink()
            return None

    def save(self, key: str, gates: list[GateResult], *, measured_by: str) -> None:
        entry = {
            "format": FORMAT,
            "key": key,
            "measured_by": measured_by,
            "measured_at": time.time(),
            "gates": GATES.dump_python(gates, mode="json"),
        }
        encoded = json.dumps(entry).encode()
        if len(encoded) > ENTRY_MAX_BYTES:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        handle, tmp = tempfile.mkstemp(dir=self.folder, prefix=".entry-", suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(encoded)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.folder / f"{key}.json")
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        self._prune()

    def _prune(self) -> None:
        """Only the newest ENTRIES_KEPT entries stay."""
        entries = []
        for path in self.folder.glob("*.json"):
            with contextlib.suppress(OSError):
                entries.append((path.stat().st_mtime, path))
        for _, path in sorted(entries, reverse=True)[ENTRIES_KEPT:]:
            with contextlib.suppress(OSError):
                path.unlink()


def installed_identity(worktree: Path, kept: list[str]) -> str:
    """What the setup left, by its packages' records: a dependency the setup resolved to
    another version (no lockfile pins it) is another baseline. Links are not followed."""
    digest = hashlib.sha256()
    marker = str(worktree).encode()
    for name in sorted(kept):
        top = worktree / name.rstrip("/")
        digest.update(b"\0path\0" + name.encode())
        if top.is_file() and not top.is_symlink():
            _add_file(digest, top, name, marker)
            continue
        for where, dirs, files in os.walk(top, followlinks=False):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and d != ".cache")
            for file in sorted(files):
                if file in MANIFEST_NAMES or file.endswith(MANIFEST_SUFFIXES):
                    path = Path(where) / file
                    _add_file(digest, path, str(path.relative_to(worktree)), marker)
    return digest.hexdigest()


def _add_file(digest: Any, path: Path, name: str, marker: bytes) -> None:
    with contextlib.suppress(OSError):
        if path.is_symlink():
            return
        size = path.stat().st_size
        body = path.read_bytes() if size <= MANIFEST_MAX_BYTES else str(size).encode()
        digest.update(b"\0file\0" + name.encode() + b"\0" + body.replace(marker, b"<worktree>"))


@functools.cache
def _collectors() -> str:
    """The code that runs the gates and reads their results: a change to it (between two
    releases, in a checkout) must not reuse results it would collect differently."""
    digest = hashlib.sha256()
    for path in sorted(VERDICT_CODE.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _version() -> str:
    try:
        return version("reqdrive")
    except PackageNotFoundError:
        return "unknown"
