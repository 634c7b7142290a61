"""Real projects' source archives for the end-to-end tests: fetched once, pinned by hash.

The archives (PyPI sdists, npm tarballs) are downloaded at test time into the repository's
`.cache/sources/<sha256>/` (gitignored), never copied into this repository. A download whose
hash differs from the pin is refused; an unreachable registry fails the test with what to fix
rather than skipping it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import posixpath
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

CACHE_DIR = Path(__file__).resolve().parents[2] / ".cache" / "sources"
DOWNLOAD_TIMEOUT_S = 120
CHUNK = 1 << 16


class SourceUnavailable(RuntimeError):
    """A pinned archive could not be had or unpacked; the message says what to fix."""


def fetch_pinned(url: str, sha256: str) -> Path:
    """Return the archive at `url`, downloaded once into `.cache/sources/<sha256>/<filename>`.

    The file's SHA-256 must be `sha256`: a mismatch is refused and nothing is kept. Parallel
    test workers share the download: a file lock makes the first one fetch it and the others
    wait and find it done.
    """
    sha256 = sha256.lower()
    name = PurePosixPath(unquote(urlsplit(url).path)).name
    if not name or len(sha256) != 64:
        raise ValueError(f"fetch_pinned needs a file URL and a 64-hex sha256: {url!r} {sha256!r}")
    folder = CACHE_DIR / sha256
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file() and _digest(target) == sha256:
            return target
        target.unlink(missing_ok=True)
        partial = _download(url, folder)
        got = _digest(partial)
        if got != sha256:
            partial.unlink()
            raise SourceUnavailable(
                f"{url} has sha256 {got}, not the pinned {sha256}: refusing it (the registry "
                "served other bytes under this URL; check the pin)"
            )
        partial.replace(target)
    return target


def unpack(archive: Path, dest: Path) -> Path:
    """Unpack a .tar.gz/.tgz/.zip into `dest` and return the project's root.

    A member with an absolute path, a `..` part, or a link pointing out of `dest` is refused.
    The root is the one top folder the archive holds (`pkg-1.0/` in an sdist, `package/` in an
    npm tarball), else `dest` itself.
    """
    dest.mkdir(parents=True, exist_ok=True)
    name = archive.name.lower()
    if name.endswith((".tar.gz", ".tgz")):
        _untar(archive, dest)
    elif name.endswith(".zip"):
        _unzip(archive, dest)
    else:
        raise SourceUnavailable(f"{archive}: not a .tar.gz, .tgz or .zip archive")
    entries = [p for p in dest.iterdir() if p.name != "pax_global_header"]
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return dest


def _download(url: str, folder: Path) -> Path:
    if not _scheme_ok(url):
        raise ValueError(f"fetch_pinned fetches https URLs only: {url!r}")
    descriptor, name = tempfile.mkstemp(dir=folder, prefix=".download-")
    partial = Path(name)
    try:
        with (
            os.fdopen(descriptor, "wb") as out,
            urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as answer,  # noqa: S310
        ):
            shutil.copyfileobj(answer, out, CHUNK)
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        partial.unlink(missing_ok=True)
        raise SourceUnavailable(
            f"could not download {url}: {error}. These tests fetch real projects from the "
            "package registry on first use and cache them in .cache/sources/: run them once "
            "with network to the registry (an https proxy is read from HTTPS_PROXY)"
        ) from error
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return partial


def _scheme_ok(url: str) -> bool:
    return urlsplit(url).scheme == "https"


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for chunk in iter(lambda: data.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _check_member(dest: Path, member: str) -> None:
    parts = PurePosixPath(member.replace("\\", "/")).parts
    if member.startswith(("/", "\\")) or (parts and ":" in parts[0]) or ".." in parts:
        raise SourceUnavailable(f"refusing archive member {member!r}: it points out of {dest}")


def _check_link(dest: Path, member: str, target: str) -> None:
    """A link's target, read from the link's own folder, must stay inside `dest`."""
    if target.startswith("/"):
        raise SourceUnavailable(f"refusing link {member!r} -> {target!r}: an absolute target")
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(member), target))
    if joined == ".." or joined.startswith("../"):
        raise SourceUnavailable(f"refusing link {member!r} -> {target!r}: it points out of {dest}")


def _untar(archive: Path, dest: Path) -> None:
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        for member in members:
            _check_member(dest, member.name)
            if member.issym():
                _check_link(dest, member.name, member.linkname)
            elif member.islnk():
                _check_member(dest, member.linkname)  # a hard link names an archive member
            elif not (member.isfile() or member.isdir()):
                raise SourceUnavailable(f"refusing archive member {member.name!r}: not a file")
        # "data" also refuses what the checks above cover; they come first for the message.
        tar.extractall(dest, members=members, filter="data")


def _unzip(archive: Path, dest: Path) -> None:
    with zipfile.ZipFile(archive) as bundle:
        for info in bundle.infolist():
            _check_member(dest, info.filename)
        bundle.extractall(dest)  # noqa: S202 - every member checked above
