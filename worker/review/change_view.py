"""What the blind reviewer is shown of a change: its diff, and its commit's files laid out fresh.

Fresh: no git history, no ignored files, never the requirement's file."""

from __future__ import annotations

import tarfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath

from worker.confine.safe_paths import empty_folder
from worker.git.runner import run_git
from worker.review.blindness import first_leak

DIFF_CHARS = 60_000  # of the diff in the prompt; the reviewer reads the files for the rest
SCAN_FILE_BYTES = 1024 * 1024  # a larger file is data, not prose: not read for the check
SCAN_TOTAL_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ChangeView:
    """A change as the blind reviewer sees it."""

    files: list[str]
    diff: str
    diff_cut: int  # the diff's length when it was cut, else 0


def change_of(worktree: Path, base: str, head: str) -> ChangeView:
    """The diff from `base` to `head`, cut to DIFF_CHARS, and the files it touches."""
    names = run_git(["diff", "--name-only", "--no-renames", "-z", base, head], cwd=worktree)
    diff = run_git(["diff", "--no-color", "--no-ext-diff", base, head], cwd=worktree)
    diff = _text(diff)
    cut = len(diff) if len(diff) > DIFF_CHARS else 0
    return ChangeView([_text(n) for n in names.split("\0") if n], diff[:DIFF_CHARS], cut)


def _text(value: str) -> str:
    """git's bytes that are not UTF-8 (a file name, a binary line) shown as U+FFFD: a prompt
    is text, and the run folder keeps it."""
    return value.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="replace")


def lay_out(worktree: Path, commit: str, target: Path, hidden: Sequence[str]) -> None:
    """`commit`'s tracked files in `target` (emptied first), without the `hidden` paths.

    From git's archive of the commit, not the worktree: a file the implementer left ignored
    (notes, a copy of the prompt) is not there, nor is the history whose messages name the
    stories."""
    empty_folder(target)
    with _archive(worktree, commit, target, hidden) as (tar, members):
        # Each member passes tarfile's data filter (_plain_data) or is left out.
        tar.extractall(target, members=members, filter=_plain_data)  # noqa: S202


def held_at(
    worktree: Path, commit: str, target: Path, hidden: Sequence[str], sentences: Sequence[str]
) -> set[str]:
    """The sentences some file of `commit` already holds, of the files lay_out would lay
    into `target`: read from git's archive of it, never written out (only the worker reads
    them)."""
    with _archive(worktree, commit, target, hidden) as (tar, members):
        kept = [m for m in (_plain_data(m, str(target)) for m in members) if m is not None]
        # In the order _texts reads a folder: by path.
        files = sorted((m for m in kept if m.isreg()), key=lambda m: PurePosixPath(m.name).parts)
        return _held(
            _scanned((m.name, m.size, partial(_read_member, tar, m)) for m in files), sentences
        )


@contextmanager
def _archive(
    worktree: Path, commit: str, target: Path, hidden: Sequence[str]
) -> Iterator[tuple[tarfile.TarFile, list[tarfile.TarInfo]]]:
    """git's archive of `commit`, beside `target`, and its members but the `hidden` paths."""
    archive = target.with_name(target.name + ".tar")
    run_git(["archive", "--format=tar", "-o", str(archive), commit], cwd=worktree)
    skip = {str(PurePosixPath(p)) for p in hidden}
    try:
        with tarfile.open(archive) as tar:
            yield tar, [m for m in tar.getmembers() if str(PurePosixPath(m.name)) not in skip]
    finally:
        archive.unlink(missing_ok=True)


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    handle = tar.extractfile(member)
    return b"" if handle is None else handle.read()


def _plain_data(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's data filter, a member it refuses (a link out of the folder, a device) left
    out instead of ending the extraction: the reviewer reads code, not links."""
    try:
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        return None


def leak_in_files(folder: Path, secret_sentences: Sequence[str]) -> tuple[str, str] | None:
    """(file, sentence) for the first file under `folder` holding one of the sentences."""
    if not secret_sentences:
        return None
    for name, text in _texts(folder):
        leak = first_leak(text, secret_sentences)
        if leak is not None:
            return name, leak
    return None


def _held(texts: Iterable[tuple[str, str]], secret_sentences: Sequence[str]) -> set[str]:
    """The sentences one of these texts holds."""
    left, held = list(secret_sentences), set()
    for _, text in texts:
        while left and (found := first_leak(text, left)) is not None:
            held.add(found)
            left.remove(found)
        if not left:
            break
    return held


def _texts(folder: Path) -> Iterator[tuple[str, str]]:
    """Each plain file under `folder` as text, within the scan's size budgets."""
    files = []
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        files.append((str(path.relative_to(folder)), path.stat().st_size, path.read_bytes))
    return _scanned(files)


def _scanned(files: Iterable[tuple[str, int, Callable[[], bytes]]]) -> Iterator[tuple[str, str]]:
    """(name, text) of each (name, size, how to read it), in the order given, within the
    scan's size budgets."""
    budget = SCAN_TOTAL_BYTES
    for name, size, read in files:
        if size > SCAN_FILE_BYTES or size > budget:
            continue
        budget -= size
        yield name, read().decode("utf-8", errors="replace")
