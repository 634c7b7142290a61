"""The worker's own bytecode of library modules, copied into each gate run's pycache folder.

Every gate run's Python keeps its bytecode in a fresh folder (PYTHONPYCACHEPREFIX, gates.py):
bytecode a gate or the agent left is never what a later run executes. Fresh, it also makes
every run compile again everything it imports, the standard library and pytest included:
about a tenth of a suite's CPU on a real project, paid by every run, however small. The seed
keeps that part: after a run, the names of the modules it compiled from sources under the
interpreter's own library folders (never the worktree, never a folder a gate can write) are
compiled once more by the worker itself, from those sources, into the seed; before a run, the
seed is copied into its fresh folder. What a gate wrote is only ever read for its file names,
never its bytes, and the copy a gate gets is its own: nothing it writes there reaches another
run. A seeded file is stamped with its source's modification time and size, as Python's own
bytecode is: a changed source is compiled again, as it would be without the seed."""

from __future__ import annotations

import contextlib
import os
import py_compile
import shutil
import stat
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from pathlib import Path

TAG = sys.implementation.cache_tag  # the only bytecode the worker's compiler may produce
SUFFIX = f".{TAG}.pyc"  # plain bytecode; pytest's rewritten modules ("-pytest-9.2.pyc") are not


def library_roots() -> list[Path]:
    """The worker interpreter's library folders: the standard library and site-packages."""
    paths = sysconfig.get_paths()
    found = {Path(paths[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return sorted(found)


class UnsafeSeed(ValueError):
    """The seed's folder is not the worker's own: someone else could write bytecode into it."""


def check_private(folder: Path, *, whole: bool = False) -> None:
    """Refuse a seed folder another user could write: every check would execute its bytecode,
    and a forged pytest there passes what fails. The folder (if it exists) must be the
    worker's, writable by it alone; no folder above it may let others rename it away (the
    one it is in: writable by others only with the sticky bit, as /tmp is; those further up:
    not writable by everyone without it). `whole`: everything in it too (at start)."""
    folder = Path(os.path.abspath(folder))
    what = f"the bytecode seed {folder} (REQDRIVE_BYTECODE_SEED)"
    for depth, above in enumerate(folder.parents):
        try:
            mode = os.stat(above).st_mode
        except OSError:
            continue  # made with the worker's own mode when first learned into
        if mode & (0o022 if depth == 0 else 0o002) and not mode & stat.S_ISVTX:
            raise UnsafeSeed(
                f"{what} is in {above}, which others may write: give it a folder of the "
                "worker's own"
            )
    try:
        own = os.lstat(folder)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(own.st_mode) or not stat.S_ISDIR(own.st_mode):
        raise UnsafeSeed(f"{what} is not a folder: name a folder, not a link or a file")
    if own.st_uid != os.geteuid():
        raise UnsafeSeed(f"{what} belongs to another user: give the worker a folder of its own")
    if own.st_mode & 0o022:
        raise UnsafeSeed(f"{what} is writable by others: run `chmod go-w {folder}`")
    if whole and own.st_mode & 0o011:  # others can reach inside: what is there must be safe
        _check_inside(folder, what)


def _check_inside(folder: Path, what: str) -> None:
    """Nothing in the seed another user owns or may write, and no link: only what the
    worker's compiler wrote."""
    for where, folders, files in os.walk(folder):
        for name in [*folders, *files]:
            path = os.path.join(where, name)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
                raise UnsafeSeed(
                    f"{what} holds {path}, which is a link, another user's, or writable by "
                    f"others: remove the folder (the worker fills it again) or run "
                    f"`chmod -R go-w {folder}`"
                )


class BytecodeSeed:
    """The worker's own compiled bytecode of library modules, in PYTHONPYCACHEPREFIX's layout
    (the source's absolute folder, then `<name>.<tag>.pyc`)."""

    def __init__(self, folder: Path, roots: Sequence[Path] | None = None) -> None:
        self.folder = folder
        self.roots = [Path(r) for r in (library_roots() if roots is None else roots)]

    def lay_into(self, prefix: Path) -> None:
        """A copy of the seed as the run's fresh pycache folder (made here); an empty folder
        when the seed is not the worker's own (it was checked when the worker started: this
        catches a change since, and costs the run only its speed)."""
        if self.folder.is_dir() and self._private():
            shutil.copytree(self.folder, prefix, symlinks=True)
        else:
            prefix.mkdir()

    def learn(self, prefix: Path, keep_out: Iterable[Path]) -> int:
        """Compile into the seed, from their sources, the library modules a run compiled into
        `prefix` (its fresh folder) and the seed lacks; `keep_out`: folders (the worktree, the
        gate's own) whose sources are never seeded. How many were added."""
        if not self._private():
            return 0
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        outside = [Path(os.path.abspath(p)) for p in keep_out]
        added = 0
        for source in compiled_sources(prefix):
            if any(source.is_relative_to(p) for p in outside):
                continue
            target = self.folder / source.parent.relative_to("/") / f"{source.stem}{SUFFIX}"
            # Seeded already, as most are after a run's first check: nothing to add, and no
            # need to walk the source's path.
            if _stamped_for(target, source) or not self._in_roots(source):
                continue
            with contextlib.suppress(OSError, py_compile.PyCompileError, ValueError):
                self._make_folders(target.parent)
                # As a plain run compiles it (asserts kept), stamped as Python stamps it.
                py_compile.compile(
                    str(source),
                    cfile=str(target),
                    doraise=True,
                    optimize=0,
                    invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP,
                )
                # py_compile gives it its source's mode, which may be group-writable: the
                # seed's files are writable by the worker alone, readable by every check.
                os.chmod(target, 0o644)
                added += 1
        return added

    def _make_folders(self, folder: Path) -> None:
        """The seed's folders down to `folder`, the worker's alone whatever its umask
        (py_compile would make them with the default mode)."""
        for step in reversed([folder, *folder.parents]):
            if step.is_relative_to(self.folder) and not step.is_dir():
                step.mkdir(mode=0o700)

    def _private(self) -> bool:
        try:
            check_private(self.folder)
        except UnsafeSeed:
            return False
        return True

    def _in_roots(self, source: Path) -> bool:
        """A regular file under a library folder, reached through no link."""
        try:
            real = source.resolve(strict=True)
        except OSError:
            return False
        return real == source and real.is_file() and any(real.is_relative_to(r) for r in self.roots)


def compiled_sources(prefix: Path) -> list[Path]:
    """The source each plain bytecode file in a run's pycache folder stands for (only its
    name is read). The folder itself may have been made a link by the check: none then."""
    found: list[Path] = []
    if os.path.islink(prefix) or not os.path.isdir(prefix):
        return found
    for folder, _dirs, files in os.walk(prefix):
        for name in files:
            if name.endswith(SUFFIX) and not os.path.islink(os.path.join(folder, name)):
                where = Path("/") / Path(folder).relative_to(prefix)
                found.append(where / (name.removesuffix(SUFFIX) + ".py"))
    return found


def _stamped_for(target: Path, source: Path) -> bool:
    """The seeded file exists and is stamped with the source's modification time and size as
    they are now: a library upgraded since it was seeded is compiled into the seed again."""
    try:
        with open(target, "rb") as seeded:
            header = seeded.read(16)
        stat = source.stat()
    except OSError:
        return False
    flags = int.from_bytes(header[4:8], "little")
    mtime = int.from_bytes(header[8:12], "little")
    size = int.from_bytes(header[12:16], "little")
    return (
        len(header) == 16
        and flags == 0
        and mtime == int(stat.st_mtime) & 0xFFFFFFFF
        and size == stat.st_size & 0xFFFFFFFF
    )
