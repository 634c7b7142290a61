"""The worker's own bytecode of the worktree's modules, for the next check of the same run.

Each check's Python starts from a fresh pycache folder (verdict/gates.py) with the library
seed laid in (bytecode_seed.py); what the worktree holds — the project's own modules, and
the `.venv` its setup made there with the test runner and every dependency — was compiled
again by every check: on a real project, seconds of each check, many times a run. This keeps
that part for the run: after a check, the worktree modules it compiled are compiled once more
by the worker, from their bytes as they are then, into a folder of the run's own that no
agent or check is given; before the next check they are laid in beside the library seed.

Unlike the library's, these sources are the agent's to write, so nothing is taken on their
time and size. Each compiled file is named by the SHA-256 of its source's path and bytes, and
is the compile of exactly those bytes: before a check, a module's bytecode is laid in only
under the name its source has now. It is also hash-checked (PEP 552), so Python compares it
with the source once more at import (that hash is short and public, which is why it is not
the only check). A source changed since, its time and size kept or not, is compiled by the
check, as it would be without this folder.

The worker compiles in a process of its own, isolated from the worktree, silent and bounded
(memory, time, and bytes and modules per check and per run), so a source made to crash or
exhaust a compiler costs that process, not the run. It reads only regular files of the
worktree, walked to from the worktree without following any link (a check may still be
running in parallel and swapping folders), and with no other name on the disk unless everyone
may read it (a hard link could make the worker read a file the check cannot). A check's own
bytecode is only ever read for its file names, never its bytes."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from worker.confine.bytecode_seed import SUFFIX, compiled_sources
from worker.confine.safe_paths import open_under

# A module larger than this is left to the check to compile: the worker reads none of it.
MAX_SOURCE_BYTES = 4 * 1024 * 1024
# What one check's learning reads and compiles at most, and what a run keeps at most: a
# project's own modules and its .venv are far below; a worktree made to flood the worker is
# cut there, and its checks compile the rest themselves.
MAX_LEARN_BYTES = 64 * 1024 * 1024
MAX_LEARN_MODULES = 5000
MAX_RUN_BYTES = 512 * 1024 * 1024
COMPILE_TIMEOUT_S = 120.0
# The compiling process's address space: enough for any real module's compile.
COMPILE_MEMORY_BYTES = 2 * 1024 * 1024 * 1024
# Run by the worker's own interpreter, isolated (-I -S) and warning nothing (-W ignore; its
# output is thrown away in any case): reads [copy, target, source] triples as JSON on stdin
# and writes hash-checked bytecode of each copy (the bytes the worker read, never the
# worktree's file again) for its source; a source that does not compile is skipped.
COMPILER = f"""
import json, os, py_compile, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({COMPILE_MEMORY_BYTES}, {COMPILE_MEMORY_BYTES}))
for copy, target, source in json.load(sys.stdin):
    try:
        py_compile.compile(copy, cfile=target, dfile=source, doraise=True, optimize=0,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError,
            py_compile.PyCompileError):
        pass
"""
# {"sources": {source: key of its bytes when last compiled}, "failed": [keys that did not
# compile], "bytes": what the run has compiled}. Only which sources to look at is taken from
# it: what is laid in is found by the key of the source as it is.
MANIFEST = "sources.json"
TREE = "tree"
# Parallel checks of one run learn at once; each rewrites the manifest whole.
_MANIFEST_LOCK = threading.Lock()


class WorktreeBytecode:
    """One run's bytecode of its worktree's modules: compiled files named by their source's
    key, and a manifest of the sources they were compiled for."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def lay_into(self, prefix: Path, worktree: Path) -> None:
        """Into the check's pycache folder (made already, the library seed in it), the
        compiled file of each known source as its bytes are now, if the run has one."""
        root = Path(os.path.realpath(worktree))
        for source in self._manifest()["sources"]:
            path = Path(source)
            data = _read(root, path)
            if data is None:
                continue
            kept = self.folder / TREE / f"{key_of(path, data)}{SUFFIX}"
            target = prefix / path.parent.relative_to("/") / f"{path.stem}{SUFFIX}"
            with contextlib.suppress(OSError):
                if _header_hash(kept) == importlib.util.source_hash(data):
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(kept, target)

    def learn(self, prefix: Path, worktree: Path) -> int:
        """Compile, from their bytes as they are now, the worktree's modules a check compiled
        into `prefix` that the run has no compiled file of. How many were asked for."""
        root = Path(os.path.realpath(worktree))
        manifest = self._manifest()
        failed = set(manifest["failed"])
        room = MAX_RUN_BYTES - manifest["bytes"]
        known: dict[str, str] = {}
        wanted: dict[str, tuple[bytes, str]] = {}
        for source in compiled_sources(prefix):
            if len(wanted) >= MAX_LEARN_MODULES:
                break
            if not source.is_relative_to(root) or ".git" in source.relative_to(root).parts:
                continue
            data = _read(root, source)
            if data is None:
                continue
            key = key_of(source, data)
            if (self.folder / TREE / f"{key}{SUFFIX}").is_file():
                known[str(source)] = key
            elif key not in failed and len(data) <= min(room, MAX_LEARN_BYTES):
                wanted[str(source)] = (data, key)
                room -= len(data)
        with contextlib.suppress(OSError):
            self._compile(wanted)
            self._remember(known, wanted)
        return len(wanted)

    def _compile(self, wanted: dict[str, tuple[bytes, str]]) -> None:
        if not wanted:
            return
        tree = self.folder / TREE
        tree.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        with tempfile.TemporaryDirectory(dir=self.folder) as copies:
            triples = []
            for n, (source, (data, key)) in enumerate(wanted.items()):
                copy = Path(copies) / f"{n}.py"
                copy.write_bytes(data)
                triples.append([str(copy), str(tree / f"{key}{SUFFIX}"), source])
            with contextlib.suppress(subprocess.TimeoutExpired):
                subprocess.run(
                    [sys.executable, "-I", "-S", "-W", "ignore", "-c", COMPILER],
                    input=json.dumps(triples).encode(),
                    cwd=copies,
                    env={},
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=COMPILE_TIMEOUT_S,
                    check=False,
                )

    def _remember(self, known: dict[str, str], wanted: dict[str, tuple[bytes, str]]) -> None:
        if not known and not wanted:
            return
        with _MANIFEST_LOCK:
            manifest = self._manifest()
            manifest["sources"].update(known)
            for source, (data, key) in wanted.items():
                manifest["bytes"] += len(data)
                if (self.folder / TREE / f"{key}{SUFFIX}").is_file():
                    manifest["sources"][source] = key
                else:  # never asked for again this run
                    manifest["failed"].append(key)
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            written = self.folder / f"{MANIFEST}.new"
            written.write_text(json.dumps(manifest))
            written.replace(self.folder / MANIFEST)

    def _manifest(self) -> dict[str, Any]:
        try:
            found = json.loads((self.folder / MANIFEST).read_text())
        except (OSError, ValueError):
            found = None
        if not isinstance(found, dict):
            return {"sources": {}, "failed": [], "bytes": 0}
        return found


def key_of(source: Path, data: bytes) -> str:
    """The name of the compile of these bytes as this source."""
    return hashlib.sha256(os.fsencode(source) + b"\0" + data).hexdigest()


def _read(root: Path, source: Path) -> bytes | None:
    """The source's bytes, if the worker may read it for a check: a regular file under the
    worktree, walked to without following a link, with one name on the disk or readable by
    everyone, and of at most MAX_SOURCE_BYTES; what the descriptor opened says, not what the
    path said before."""
    try:
        fd = open_under(root, source.relative_to(root).as_posix())
    except (OSError, ValueError):
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        # A file with another name elsewhere is read only if everyone may read it: then the
        # check can read it through the worktree's name itself (uv links a .venv's files to
        # its cache); else it could be a file the check must not see, linked in.
        shared = info.st_nlink != 1 and not info.st_mode & stat.S_IROTH
        if not stat.S_ISREG(info.st_mode) or shared or info.st_size > MAX_SOURCE_BYTES:
            return None
        data = handle.read(MAX_SOURCE_BYTES + 1)
    return data if len(data) <= MAX_SOURCE_BYTES else None


def _header_hash(pyc: Path) -> bytes:
    """The source hash a hash-checked pyc carries; b"" for anything else."""
    with open(pyc, "rb") as handle:
        header = handle.read(16)
    checked = len(header) == 16 and header[:4] == importlib.util.MAGIC_NUMBER
    return header[8:16] if checked and int.from_bytes(header[4:8], "little") == 0b11 else b""
