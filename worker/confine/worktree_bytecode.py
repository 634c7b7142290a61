"""The worker's own bytecode of the worktree's modules, for the next check of the same run.

Each check's Python starts from a fresh pycache folder (verdict/gates.py) with the library
seed laid in (bytecode_seed.py); what the worktree holds — the project's own modules, and
the `.venv` its setup made there with the test runner and every dependency — was compiled
again by every check: on a real project, seconds of each check, many times a run. This keeps
that part for the run: after a check, the worktree modules it compiled are compiled once more
by the worker, from their sources as they are then, into a folder of the run's own that no
agent or check is given; before the next check it is laid in beside the library seed.

Unlike the library's, these sources are the agent's to write, so nothing is taken on their
time and size. Before a check, each module's bytecode is laid in only if its source is, by
SHA-256, the one the worker compiled; and the bytecode is hash-checked (PEP 552), so Python
compares it with the source once more at import (its hash is short and public, which is
why it is not the only check). A source changed since, its time and size kept or not, is
compiled by the check, as it would be without this folder. The worker
compiles in a process of its own, isolated from the worktree and bounded, so a source made to
crash or exhaust a compiler costs that process, not the run; only regular files in the
worktree, reached through no link and with no other name on the disk (a hard link could make
the worker read a file the check cannot), are ever read. A check's own bytecode is only ever
read for its file names, never its bytes."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from worker.confine.bytecode_seed import SUFFIX, compiled_sources

# A module larger than this is left to the check to compile: the worker reads none of it.
MAX_SOURCE_BYTES = 4 * 1024 * 1024
COMPILE_TIMEOUT_S = 120.0
# The compiling process's address space: enough for any real module's compile.
COMPILE_MEMORY_BYTES = 2 * 1024 * 1024 * 1024
# Run by the worker's own interpreter, isolated (-I -S): reads [copy, target, source] triples
# as JSON on stdin and writes hash-checked bytecode of each copy (the bytes the worker read,
# never the worktree's file again) named for its source; a source that does not compile is
# skipped.
COMPILER = f"""
import json, os, py_compile, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({COMPILE_MEMORY_BYTES}, {COMPILE_MEMORY_BYTES}))
for copy, target, source in json.load(sys.stdin):
    try:
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        py_compile.compile(copy, cfile=target, dfile=source, doraise=True, optimize=0,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError,
            py_compile.PyCompileError):
        pass
"""
# Which source each kept file stands for: {source: [file under the folder's tree, SHA-256]}.
MANIFEST = "sources.json"
TREE = "tree"
# Parallel checks of one run learn at once; each rewrites the manifest whole.
_MANIFEST_LOCK = threading.Lock()


class WorktreeBytecode:
    """One run's bytecode of its worktree's modules: a tree in PYTHONPYCACHEPREFIX's layout,
    and a manifest of the sources it was compiled from."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def lay_into(self, prefix: Path) -> None:
        """Into the check's pycache folder (made already, the library seed in it), each kept
        file whose source is still, byte for byte, the one it was compiled from."""
        for source, (kept, digest) in self._manifest().items():
            data = _readable(Path(source))
            if data is None or hashlib.sha256(data).hexdigest() != digest:
                continue
            target = prefix / kept
            target.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                shutil.copyfile(self.folder / TREE / kept, target)

    def learn(self, prefix: Path, worktree: Path) -> int:
        """Compile, from their sources as they are now, the worktree's modules a check
        compiled into `prefix` that are not kept for exactly that source. How many."""
        root = Path(os.path.abspath(worktree))
        known = self._manifest()
        wanted: dict[str, tuple[bytes, str, str]] = {}
        for source in compiled_sources(prefix):
            if not source.is_relative_to(root) or ".git" in source.relative_to(root).parts:
                continue
            data = _readable(source)
            if data is None:
                continue
            digest = hashlib.sha256(data).hexdigest()
            kept = str(source.parent.relative_to("/") / f"{source.stem}{SUFFIX}")
            if known.get(str(source)) != [kept, digest]:
                wanted[str(source)] = (data, kept, digest)
        if wanted:
            self._compile(wanted)
        return len(wanted)

    def _compile(self, wanted: dict[str, tuple[bytes, str, str]]) -> None:
        tree = self.folder / TREE
        tree.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        with tempfile.TemporaryDirectory(dir=self.folder) as copies:
            triples = []
            for n, (source, (data, kept, _digest)) in enumerate(wanted.items()):
                copy = Path(copies) / f"{n}.py"
                copy.write_bytes(data)
                triples.append([str(copy), str(tree / kept), source])
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                subprocess.run(
                    [sys.executable, "-I", "-S", "-c", COMPILER],
                    input=json.dumps(triples),
                    text=True,
                    cwd=copies,
                    env={},
                    capture_output=True,
                    timeout=COMPILE_TIMEOUT_S,
                    check=False,
                )
        with _MANIFEST_LOCK:
            manifest = self._manifest()
            for source, (_data, kept, digest) in wanted.items():
                if (tree / kept).is_file():  # compiled: a source that did not is left out
                    manifest[source] = [kept, digest]
                else:
                    manifest.pop(source, None)
            written = self.folder / f"{MANIFEST}.new"
            written.write_text(json.dumps(manifest))
            written.replace(self.folder / MANIFEST)

    def _manifest(self) -> dict[str, list[str]]:
        try:
            found = json.loads((self.folder / MANIFEST).read_text())
        except (OSError, ValueError):
            return {}
        return found if isinstance(found, dict) else {}


def _readable(source: Path) -> bytes | None:
    """The source's bytes, if the worker may read it for a check: a regular file of at most
    MAX_SOURCE_BYTES, reached through no link, with one name on the disk."""
    try:
        info = os.lstat(source)
        if (
            not stat.S_ISREG(info.st_mode)
            or info.st_nlink != 1
            or info.st_size > MAX_SOURCE_BYTES
            or source.resolve(strict=True) != source
        ):
            return None
        with open(source, "rb", opener=_no_follow) as handle:
            return handle.read(MAX_SOURCE_BYTES + 1)
    except OSError:
        return None


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)
