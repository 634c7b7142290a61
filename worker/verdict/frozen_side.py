"""One side of a staged change kept, the other reverted: the tests call keeps only the test
side, the implement call only the code; and test-side files git ignores, dropped when new."""

from __future__ import annotations

import contextlib
import os
from enum import StrEnum
from pathlib import Path

from worker.confine.safe_paths import LinkError, open_under, remove_under
from worker.git.at_commit import read_file_at
from worker.git.runner import run_git
from worker.git.scope import revert_staged
from worker.verdict.test_side import TestSide, Unsplittable, is_mixed, splice

SYMLINK_MODE = "120000"


class Keep(StrEnum):
    """Which side of a change stays."""

    TESTS = "tests"  # the tests call: only the test side may change
    CODE = "code"  # the implement call: the test side stays as frozen


def keep_side(cwd: Path, base: str, side: TestSide, keep: Keep) -> list[str]:
    """The change staged on `base` cut to one side: every path of the other side put back as
    `base` has it (a mixed file's part of it), every link on the test side (or any link, in
    the tests call) refused. The paths reverted, sorted."""
    changed = _staged_changes(cwd, base)
    links = _staged_links(cwd, [p for p in changed if p])
    refused = [p for p in links if keep is Keep.TESTS or side.reaches(p) or _names_folder(cwd, p)]
    if refused:
        revert_staged(cwd, base, refused)
    reverted = set(refused)
    whole = []
    for path in changed:
        if path in reverted:
            continue
        if is_mixed(path):
            if _cut_mixed(cwd, base, path, keep):
                reverted.add(path)
        elif side.covers(path) != (keep is Keep.TESTS):
            whole.append(path)
    if whole:
        revert_staged(cwd, base, whole)
    return sorted(reverted | set(whole))


def _staged_changes(cwd: Path, base: str) -> list[str]:
    listed = run_git(["diff", "--cached", "--name-only", "--no-renames", "-z", base], cwd=cwd)
    return [p for p in listed.split("\0") if p]


def _staged_links(cwd: Path, paths: list[str]) -> list[str]:
    if not paths:
        return []
    listed = run_git(["ls-files", "-s", "-z", "--", *paths], cwd=cwd)
    links = []
    for entry in listed.split("\0"):
        meta, _, name = entry.partition("\t")
        if meta.startswith(SYMLINK_MODE):
            links.append(name)
    return links


def _names_folder(cwd: Path, path: str) -> bool:
    """Does the link at `path` lead to a folder (which could hold test files behind it)?"""
    return os.path.isdir(cwd / path)


def _cut_mixed(cwd: Path, base: str, path: str, keep: Keep) -> bool:
    """A mixed file's other part put back as `base` has it; True when anything changed."""
    before = read_file_at(cwd, base, path)
    staged = run_git(["show", f":{path}"], cwd=cwd, check=False) if _in_index(cwd, path) else None
    try:
        if keep is Keep.TESTS:
            wanted = splice(path, tests_from=staged, rest_from=before)
        else:
            wanted = splice(path, tests_from=before, rest_from=staged)
    except Unsplittable:
        wanted = before  # the parts cannot be told apart: the whole file as it was
    if wanted == staged:
        return False
    if wanted is None or wanted == before:
        revert_staged(cwd, base, [path])
        return True
    _write(cwd, path, wanted)
    run_git(["add", "--", path], cwd=cwd)
    return True


def _in_index(cwd: Path, path: str) -> bool:
    return bool(run_git(["ls-files", "-z", "--", path], cwd=cwd))


def _write(cwd: Path, path: str, text: str) -> None:
    fd = open_under(cwd, path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text if text.endswith("\n") else text + "\n")


# Test-side files git ignores (an untracked conftest.py a changed .gitignore hides, a .pth in
# the setup's virtualenv): never staged, so kept_side cannot see them. Each is noted before
# the implement call; one that is new or changed afterwards is removed before any gate runs.
Snapshot = dict[str, tuple[int, int, int]]


def ignored_test_files(cwd: Path, side: TestSide) -> Snapshot:
    """The ignored files on the test side now, with their mode, size and change time."""
    listed = run_git(["ls-files", "-z", "--others", "--ignored", "--exclude-standard"], cwd=cwd)
    found: Snapshot = {}
    for path in listed.split("\0"):
        if path and (side.covers(path) or is_mixed(path)):
            with contextlib.suppress(OSError):
                info = os.lstat(cwd / path)
                found[path] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return found


def drop_new_ignored(cwd: Path, side: TestSide, before: Snapshot) -> list[str]:
    """Remove the ignored test-side files that are new or changed since `before`."""
    dropped = []
    for path, seen in ignored_test_files(cwd, side).items():
        if before.get(path) != seen:
            with contextlib.suppress(LinkError, FileNotFoundError):
                remove_under(cwd, path)
            dropped.append(path)
    return sorted(dropped)


# The test side is read-only while a check runs: the story's code runs in it, and code that
# rewrote a frozen test before pytest imported it (then left the clean-up to put it back)
# would be judged on a test of its own. Each tracked test-side file is bound read-only over
# itself; past this many, a folder wholly on the test side is bound once instead.
READONLY_FILES_MAX = 2000


def frozen_paths(cwd: Path, side: TestSide) -> list[str]:
    """The tracked test-side paths to lay read-only over the worktree for a check: every
    file (a mixed file's test part cannot be bound apart, so those stay writable), or, for
    a large test side, the topmost folders wholly on it and the files outside them."""
    listed = run_git(["ls-files", "-z", "--cached"], cwd=cwd)
    files = [p for p in listed.split("\0") if p and side.covers(p) and not is_mixed(p)]
    files = [p for p in files if os.path.isfile(cwd / p) and not os.path.islink(cwd / p)]
    if len(files) <= READONLY_FILES_MAX:
        return files
    paths: list[str] = []
    for path in files:
        parts = path.split("/")
        top = next(
            (
                "/".join(parts[:n])
                for n in range(1, len(parts))
                if side.covers("/".join(parts[:n]) + "/x")
            ),
            path,
        )
        if top not in paths:
            paths.append(top)
    return paths


def file_states(cwd: Path, paths: list[str]) -> dict[str, tuple[int, ...] | None]:
    """Each path's kind, size, inode and change times (None: gone), to compare after a check."""
    states: dict[str, tuple[int, ...] | None] = {}
    for path in paths:
        try:
            info = os.lstat(cwd / path)
        except OSError:
            states[path] = None
            continue
        states[path] = (info.st_mode, info.st_size, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)
    return states


def changed_during_check(cwd: Path, before: dict[str, tuple[int, ...] | None]) -> list[str]:
    """The test-side paths a check changed or removed, before its clean-up puts them back
    (with the sandbox off nothing binds them read-only). A folder renamed aside and back
    while the check ran is not seen: its files keep their inode and times."""
    after = file_states(cwd, list(before))
    return sorted(p for p, seen in before.items() if after[p] != seen)
