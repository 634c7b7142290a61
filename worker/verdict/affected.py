"""The test files a story's change can affect: those whose imports reach a changed file."""

from __future__ import annotations

import functools
import hashlib
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

from worker.confine.safe_paths import open_under
from worker.exceptions import GitError
from worker.git.runner import run_git
from worker.verdict.imports import ModuleName, cached_imports
from worker.verdict.pytest_settings import (
    PytestSettings,
    UnreadableSettings,
    combined,
    is_config_file,
)
from worker.verdict.test_side import TestSide

# Past this many tracked .py files parsing is no longer cheap: the whole suite runs instead.
# Measured on sympy (1,562 files, 26 MB) on a busy 2-core machine: 16.5 s cold (ast.parse is
# nearly all of it, about 0.6 s per MB), 150 ms warm. The cache lives in the process that runs
# the job (rq forks one per job), so a run pays the cold parse once.
MAX_PY_FILES = 20_000
# A source or config file larger than this is not read (generated tables): whole suite.
MAX_FILE_BYTES = 4 * 1024 * 1024
# Prose no test imports. Not `.txt`: pytest collects `test*.txt` as doctests, and a
# requirements file changes what is installed. Prose on the test side may be a test's data.
PROSE_SUFFIXES = frozenset({".md", ".markdown", ".rst"})
# Modules that run before or around every test (pytest's conftests, Python's startup hooks),
# or build the package under test: a change that reaches one reaches every test.
EVERY_TEST_MODULES = frozenset(
    {"conftest.py", "sitecustomize.py", "usercustomize.py", "setup.py", "noxfile.py"}
)
SYMLINK_MODE = "120000"
PACKAGE_FILE = "__init__.py"


class _CannotTell(Exception):
    """The change is one this selection cannot reason about; never leaves this module."""


def affected_test_files(
    worktree: Path, changed: Sequence[str], test_side: TestSide
) -> list[str] | None:
    """The test modules a change can affect, sorted: every test module on the test side
    whose imports reach a changed `.py` file (directly or through other modules and the
    packages' `__init__.py`), and each changed test module still there; with
    `--doctest-modules`, every module reached too (its examples are tests). [] when only prose
    changed, or only test modules that are gone now.

    None, "run the whole suite", when the change cannot be reasoned about this way: a
    changed file other than `.py` or prose off the test side; a changed or reached conftest,
    plugin, startup hook or setup.py; a changed `.py` file git does not track, or one that
    is no test module and that no test module imports (a script, a CLI); doctests from a
    glob in a pytest config's `addopts`; more than MAX_PY_FILES `.py` files; or a file that cannot
    be read safely, or parsed within the interpreter's recursion limit. `worktree` is checked
    out at the story's commit, its tracked files as git's index has them; `changed` are the
    story's paths (relative, POSIX), deleted ones included. A module named at run time is not
    followed: the run's final whole-suite check is what catches that.
    """
    try:
        return _select(worktree, changed, test_side)
    # RecursionError: a module nested deeper than ast can build (a generated table), which
    # no SyntaxError reports; its imports cannot be read, so nothing can be left out.
    except (_CannotTell, UnreadableSettings, GitError, OSError, RecursionError):
        return None


def _select(worktree: Path, changed: Sequence[str], side: TestSide) -> list[str]:
    tracked = _tracked(worktree)
    starts = _changed_modules(worktree, changed, tracked, side)
    settings = _settings(worktree, tracked)  # first: a doctest glob may collect the prose
    if not starts:
        return []
    if sum(p.endswith(".py") for p in tracked) > MAX_PY_FILES:
        raise _CannotTell("too many files")
    graph = _ImportGraph(worktree, tracked, starts - tracked.keys())

    def is_test(path: str) -> bool:
        return path in tracked and settings.is_test_module(path) and side.covers(path)

    def holds_doctests(path: str) -> bool:  # --doctest-modules: a module's own examples
        return settings.doctest_modules and path in tracked and path.endswith(".py")

    selected: set[str] = set()
    for start in starts:
        reached = graph.importers({start})
        # Code no test imports is run some other way (a console script a test starts, a
        # file a test reads, a plugin found by name): which tests that reaches, we cannot tell.
        is_test_side_module = settings.is_test_module(start) and side.covers(start)
        if not is_test_side_module and not any(map(is_test, reached)):
            raise _CannotTell("a changed module no test imports")
        selected |= reached
    selected |= graph.importers(graph.links)
    loaded_by_all = graph.files_of(settings.plugins)
    if any(_runs_for_every_test(p) or p in loaded_by_all for p in selected):
        raise _CannotTell("a module every test loads")
    return sorted(p for p in selected if is_test(p) or holds_doctests(p))


def _tracked(worktree: Path) -> dict[str, tuple[str, str]]:
    """Each tracked path's mode and blob id, as git's index has them."""
    found = {}
    for entry in run_git(["ls-files", "--stage", "-z"], cwd=worktree).split("\0"):
        if not entry:
            continue
        meta, _, path = entry.partition("\t")
        mode, blob, stage = meta.split(" ")
        if stage != "0":
            raise _CannotTell("a merge conflict in the index")
        found[path] = (mode, blob)
    return found


def _changed_modules(
    worktree: Path, changed: Sequence[str], tracked: dict[str, tuple[str, str]], side: TestSide
) -> set[str]:
    """The changed `.py` files (deleted ones too); _CannotTell for any other change."""
    starts = set()
    for path in changed:
        pure = PurePosixPath(path)
        if pure.is_absolute() or ".." in pure.parts or pure.as_posix() != path:
            raise _CannotTell("not a path inside the repository")
        if pure.suffix in PROSE_SUFFIXES and not side.covers(path):
            continue
        # Still there but not tracked: not what the story committed, so not what it is.
        if pure.suffix != ".py" or (path not in tracked and os.path.lexists(worktree / path)):
            raise _CannotTell("not a tracked Python module")
        starts.add(path)
    return starts


def _settings(worktree: Path, tracked: dict[str, tuple[str, str]]) -> PytestSettings:
    texts = [
        (path, _read(worktree, path).decode("utf-8", errors="replace"))
        for path, (mode, _) in tracked.items()
        if is_config_file(path) and mode != SYMLINK_MODE
    ]
    settings = combined(texts)
    if settings.doctests:  # doctests collected from files we cannot name (a glob)
        raise _CannotTell("doctests")
    return settings


def _runs_for_every_test(path: str) -> bool:
    return PurePosixPath(path).name in EVERY_TEST_MODULES


class _ImportGraph:
    """Who imports whom among a repository's files, with no knowledge of its import roots:
    each file answers to every dotted suffix of its path (src/pkg/mod.py to `mod`,
    `pkg.mod` and `src.pkg.mod`; a package by its `__init__.py`), and an import reaches
    every file answering to it or to one of its parents (importing `a.b.c` runs `a` and
    `a.b` first). Matching too much only selects more tests."""

    def __init__(
        self, worktree: Path, tracked: dict[str, tuple[str, str]], deleted: Iterable[str]
    ) -> None:
        self.names: dict[ModuleName, list[str]] = {}
        # A link's target is not read (it is the agent's to point anywhere): every link
        # counts as changed in every story, which selects every test that imports it.
        self.links = {p for p, (mode, _) in tracked.items() if mode == SYMLINK_MODE}
        modules = [p for p in tracked if p.endswith(".py")]
        for path in [*modules, *deleted, *self.links]:
            for start in range(len(parts := _module_parts(path))):
                self.names.setdefault(parts[start:], []).append(path)
        self.nodes = {*modules, *deleted}
        self._importers: dict[str, set[str]] = {}
        self._resolved: dict[ModuleName, list[str]] = {}
        for path in modules:
            if path in self.links:
                continue
            _, blob = tracked[path]
            read = functools.partial(_read_blob, worktree, path, blob)
            for target in self._package_of(path) + self.files_of(cached_imports(blob, path, read)):
                self._importers.setdefault(target, set()).add(path)

    def files_of(self, names: Iterable[ModuleName | str]) -> list[str]:
        """The files an import of these modules runs."""
        found = []
        for name in names:
            parts = tuple(name.split(".")) if isinstance(name, str) else name
            found += self._resolve(parts)
        return found

    def importers(self, starts: set[str]) -> set[str]:
        """The files that import any of `starts`, directly or not, and `starts` themselves."""
        reached, todo = set(starts), list(starts)
        while todo:
            for importer in self._importers.get(todo.pop(), ()):
                if importer not in reached:
                    reached.add(importer)
                    todo.append(importer)
        return reached

    def _resolve(self, parts: ModuleName) -> list[str]:
        found = self._resolved.get(parts)
        if found is None:
            ends = range(1, len(parts) + 1)
            found = self._resolved[parts] = [p for e in ends for p in self.names.get(parts[:e], ())]
        return found

    def _package_of(self, path: str) -> list[str]:
        """The nearest `__init__.py` that runs before this file: its folder's, or for a
        package's own, the one above (pytest imports a test module in a package as part of
        it); past folders without one (a namespace package inside a regular one)."""
        folders = PurePosixPath(path).parents
        if PurePosixPath(path).name == PACKAGE_FILE:
            folders = folders[1:]
        for folder in folders:
            init = (folder / PACKAGE_FILE).as_posix()
            if init in self.nodes:
                return [init]
        return []


def _module_parts(path: str) -> ModuleName:
    """The dotted name a file's whole path would give (a package's is its folder's)."""
    parts = tuple(path.removesuffix(".py").split("/"))
    return parts[:-1] if parts[-1] == "__init__" else parts


def _read_blob(worktree: Path, path: str, blob: str) -> tuple[bytes, bool]:
    """The file's bytes, and whether they are the blob git's index names (same hash)."""
    data = _read(worktree, path)
    digest = hashlib.sha1() if len(blob) == 40 else hashlib.sha256()  # noqa: S324 - git's id
    digest.update(b"blob %d\0" % len(data))
    digest.update(data)
    return data, digest.hexdigest() == blob


def _read(worktree: Path, path: str) -> bytes:
    """A regular file under the worktree, reached through no link; OSError otherwise."""
    with os.fdopen(open_under(worktree, path), "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
            raise _CannotTell("not a regular file of a readable size")
        return file.read(MAX_FILE_BYTES + 1)
