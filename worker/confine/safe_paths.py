"""Paths under a folder the agent can write, reached without following any link it made."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import NamedTuple

# A folder on the way is opened only to look inside it (O_PATH: no read permission needed);
# O_NOFOLLOW with O_DIRECTORY refuses a link there (ENOTDIR) instead of going where it points.
STEP_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# The file itself: a link refused (ELOOP), a FIFO opened without waiting for a writer.
LAST_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# The worker's own bits on a folder it must look into and empty: the agent may have taken
# them away (`chmod 000`), which stops a worker that is not root.
OWNER_BITS = stat.S_IRWXU
# Deeper than this a walk stops (LinkError): each level holds a descriptor open, and no
# repository nests folders this deep.
MAX_DEPTH = 256


class LinkError(OSError):
    """A path under an agent-writable folder leads through a link, or cannot be walked."""


def open_under(root: Path, rel: str | PurePosixPath, flags: int = os.O_RDONLY) -> int:
    """A descriptor for root/rel opened with `flags`; LinkError when the file itself or any
    folder on the way is a link (a FIFO opens without blocking: check what fstat says)."""
    with parent_of(root, rel) as (folder, name):
        try:
            return os.open(name, flags | LAST_FLAGS, dir_fd=folder)
        except OSError as error:
            raise _refused(root, rel, error) from None


@contextlib.contextmanager
def parent_of(root: Path, rel: str | PurePosixPath) -> Iterator[tuple[int, str]]:
    """The folder holding root/rel, as a descriptor walked to without following links, and
    the last name; FileNotFoundError when a folder on the way is missing."""
    parts = _parts(rel)
    folder = _open_folder(root)
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, STEP_FLAGS, dir_fd=folder)
            except OSError as error:  # ENOTDIR: a link or a file where a folder should be
                raise _refused(root, rel, error) from None
            os.close(folder)
            folder = inner
        yield folder, parts[-1]
    finally:
        os.close(folder)


def remove_under(root: Path, rel: str | PurePosixPath) -> bool:
    """Remove root/rel, whatever it is (a link itself, never what it names; a folder with
    all it holds); False when there was nothing there. LinkError when the way leads through
    a link (nothing removed) or the folder is nested too deep (part of it removed)."""
    try:
        with parent_of(root, rel) as (folder, name):
            return _remove_at(folder, name)
    except FileNotFoundError:
        return False


def unlink_under(root: Path, rel: str | PurePosixPath) -> bool:
    """Remove root/rel if it is no folder (a link itself, never what it names); False when
    it is a folder, which stays. LinkError when the way leads through a link."""
    with parent_of(root, rel) as (folder, name):
        try:
            os.unlink(name, dir_fd=folder)
        except IsADirectoryError:
            return False
    return True


def remove_tree(path: Path) -> None:
    """Remove a folder the worker made and everything the agent left in it, following no link
    inside; nothing there is fine. Folders nested past MAX_DEPTH go with GNU `rm -rf` (which
    walks by descriptor too, to any depth); OSError if even that leaves something."""
    try:
        remove_under(path.parent, path.name)
    except (LinkError, RecursionError):
        # GNU rm walks by descriptor at any depth, never through a link or into a mount.
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=False)
    if path.exists() or path.is_symlink():
        raise OSError(f"{path} could not be removed")


def fresh_folder(root: Path, rel: str | PurePosixPath, *, empty: bool = True) -> Path:
    """root/rel made empty (or with `empty=False` kept when it is a real folder), whatever
    the agent left there instead (a link, a file), with the folders on the way made if
    missing (root, the worker's own path, too); LinkError when one of those is a link."""
    parts = _parts(rel)
    root.mkdir(parents=True, exist_ok=True)
    folder = _open_folder(root)
    try:
        for depth, part in enumerate(parts, start=1):
            if depth == len(parts) and (empty or not _is_folder_at(folder, part)):
                _remove_at(folder, part)
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, dir_fd=folder)
            try:
                inner = os.open(part, STEP_FLAGS, dir_fd=folder)
            except OSError as error:
                raise _refused(root, rel, error) from None
            os.close(folder)
            folder = inner
    finally:
        os.close(folder)
    return root.joinpath(*parts)


def _is_folder_at(folder: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def empty_folder(path: Path) -> None:
    """Remove everything in `path` (made if missing), which stays: a sandbox's bound folder."""
    path.mkdir(parents=True, exist_ok=True)
    for name in os.listdir(path):
        remove_under(path, name)


def copy_out(root: Path, rel: str | PurePosixPath, target: Path) -> bool:
    """Copy the regular file root/rel to target (the worker's own path); False, with nothing
    copied, when it is missing, a link, behind a link or not a regular file."""
    try:
        fd = open_under(root, rel)
    except (FileNotFoundError, LinkError):
        return False
    with os.fdopen(fd, "rb") as source:
        if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
            return False
        with target.open("wb") as copy:
            shutil.copyfileobj(source, copy)
    return True


class Entry(NamedTuple):
    """One entry met by walk_folders: its folder's descriptor, its name, its own lstat, and
    its path under the walked folder (for a person to read)."""

    folder: int
    name: str
    info: os.stat_result
    path: str


def walk_folders(root: Path) -> Iterator[Entry]:
    """Every entry under root, a folder before what it holds and opened to its owner first;
    links are listed, never entered."""
    return _walk(_open_folder(root), root)


def _walk(top: int, root: Path) -> Iterator[Entry]:
    """walk_folders from a folder descriptor, which it closes."""
    stack: list[tuple[int, str, Iterator[str]]] = [(top, "", iter(()))]
    try:
        stack[-1] = (top, "", iter(_names(top, root)))
        while stack:
            folder, prefix, names = stack[-1]
            name = next(names, None)
            if name is None:
                os.close(stack.pop()[0])
                continue
            info = os.stat(name, dir_fd=folder, follow_symlinks=False)
            yield Entry(folder, name, info, prefix + name)
            if stat.S_ISDIR(info.st_mode):
                if len(stack) >= MAX_DEPTH:
                    raise LinkError(f"{root}: folders nested deeper than {MAX_DEPTH}")
                inner = os.open(name, STEP_FLAGS, dir_fd=folder)
                stack.append((inner, "", iter(())))  # closed by the finally if listing fails
                stack[-1] = (inner, f"{prefix}{name}/", iter(_names(inner, root)))
    finally:
        for folder, _, _ in stack:
            os.close(folder)


def set_mode_at(folder: int, name: str, mode: int) -> None:
    """chmod the entry `name` of `folder` itself, never through a link (the descriptor pins
    it; /proc's link to a descriptor is how Linux changes a mode by descriptor without read
    permission)."""
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    try:
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            return
        os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(mode))
    finally:
        os.close(fd)


def _names(folder: int, root: Path) -> list[str]:
    """The names in a folder, which is first opened to its owner if the agent closed it."""
    try:
        readable = _listable(folder)
    except OSError as error:
        raise LinkError(f"{root}: a folder cannot be listed: {error.strerror}") from None
    try:
        return os.listdir(readable)  # lists a duplicate of the descriptor
    finally:
        os.close(readable)


def _listable(folder: int) -> int:
    """A readable descriptor of `folder` (an O_PATH one cannot be listed), its owner's bits
    put back first when the agent took them away."""
    info = os.fstat(folder)
    if info.st_mode & OWNER_BITS != OWNER_BITS:
        os.chmod(f"/proc/self/fd/{folder}", stat.S_IMODE(info.st_mode) | OWNER_BITS)
    return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=folder)


def _remove_at(folder: int, name: str) -> bool:
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=folder)
        return True
    # The walk puts the owner's bits back on every folder inside, so that a worker which is
    # not root can empty them; then rmtree's own descriptor walk, which follows no link.
    for _ in _walk(os.open(name, STEP_FLAGS, dir_fd=folder), Path(name)):
        pass
    shutil.rmtree(name, dir_fd=folder)
    return True


def _open_folder(root: Path) -> int:
    try:
        return os.open(root, STEP_FLAGS)
    except OSError as error:
        raise _refused(root.parent, root.name, error) from None


def _parts(rel: str | PurePosixPath) -> list[str]:
    parts = [p for p in PurePosixPath(rel).parts if p not in ("", ".")]
    if not parts or parts[0] == "/" or ".." in parts:
        raise ValueError(f"{rel!r} is not a path inside a folder")
    return parts


def _refused(root: Path, rel: str | PurePosixPath, error: OSError) -> OSError:
    """ELOOP (the file is a link) and ENOTDIR (a folder on the way is not one) as LinkError."""
    if error.errno not in (errno.ELOOP, errno.ENOTDIR):
        return error
    return LinkError(f"{root / rel} leads through a link: {error.strerror}")
