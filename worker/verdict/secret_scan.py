"""Refuse a story's change that holds a configured secret, plainly or encoded, or can't be read."""

from __future__ import annotations

import base64
import bz2
import io
import lzma
import re
import time
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from worker.confine.limits import DEFAULT_LIMITS
from worker.confine.redact import MIN_SECRET_LENGTH, Redactor
from worker.exceptions import GitError
from worker.git.runner import run_git
from worker.verdict.packed_formats import UnscannableStream, packed_streams

# A file larger than this (as stored, or unpacked) is refused rather than read whole.
MAX_SCAN_BYTES = 20 * 1024 * 1024
# Encoded forms shorter than this would match by chance in ordinary files.
MIN_ENCODED_CHARS = 12
WHITESPACE_RE = re.compile(rb"\s+")
# Compressed files are unpacked and scanned: a secret inside one is pushed all the same.
UNPACKERS: dict[bytes, Callable[[], Decompressor]] = {
    b"\x1f\x8b": lambda: zlib.decompressobj(wbits=31),  # gzip
    b"BZh": bz2.BZ2Decompressor,
    b"\xfd7zXZ\x00": lzma.LZMADecompressor,
}
ZIP_MAGIC = b"PK\x03\x04"
# What a damaged or hostile compressed file raises while it is unpacked (zipfile raises
# RuntimeError for an encrypted member).
UNPACK_ERRORS = (
    OSError,
    EOFError,
    ValueError,
    lzma.LZMAError,
    zlib.error,
    zipfile.BadZipFile,
    RuntimeError,
)
# Blobs read by one `git show`: one process per batch instead of three per file.
BATCH_BLOBS = 1000
BATCH_BYTES = 16 * 1024 * 1024


class ScanDeadline(Exception):
    """The scan ran past its deadline: the change is refused unscanned."""


class Decompressor(Protocol):
    def decompress(self, data: bytes, max_length: int = ..., /) -> bytes: ...


@dataclass(frozen=True)
class Finding:
    """A staged file the worker will not commit, and why (its name already redacted)."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def needles(secret: str) -> dict[bytes, str]:
    """The byte strings that give a secret away, each with the encoding it is in.

    Base64 is searched at all three alignments (the secret may sit anywhere in a longer encoded
    text); multi-line secrets (PEM keys) are also matched with their whitespace removed, so a
    re-wrapped or re-indented copy is caught in a whitespace-free view of the file.
    """
    raw = secret.encode("utf-8", errors="surrogatepass")
    found = {raw: "plainly", WHITESPACE_RE.sub(b"", raw): "plainly"}
    found[raw.hex().encode()] = "hex-encoded"
    found[raw.hex().upper().encode()] = "hex-encoded"
    for offset in range(3):
        for name, encode in (("base64", base64.b64encode), ("base64url", base64.urlsafe_b64encode)):
            encoded = encode(b"\0" * offset + raw).rstrip(b"=")
            start, end = -(-offset * 8 // 6), (offset + len(raw)) * 8 // 6
            part = encoded[start:end]
            if len(part) >= MIN_ENCODED_CHARS:
                found.setdefault(part, f"{name}-encoded")  # often the same text as base64
    return {needle: how for needle, how in found.items() if needle}


class SecretScanner:
    """Looks for every configured secret, in every encoding, in the files a change adds."""

    def __init__(
        self, redactor: Redactor, deadline_s: float = DEFAULT_LIMITS.scan_deadline_s
    ) -> None:
        self.redactor = redactor
        self.deadline_s = deadline_s
        self._needles: dict[bytes, str] = {}
        # Short values match only as whole words, unencoded (see redact.MIN_SECRET_LENGTH).
        self._short: list[re.Pattern[bytes]] = []
        for secret in redactor.values():
            if len(secret) >= MIN_SECRET_LENGTH:
                self._needles.update(needles(secret))
            else:
                raw = re.escape(secret.encode("utf-8", errors="surrogatepass"))
                self._short.append(re.compile(rb"(?<![A-Za-z0-9])" + raw + rb"(?![A-Za-z0-9])"))

    def scan_change(self, cwd: Path, pre: str) -> list[Finding]:
        """Findings for the staged change on top of `pre`: names, then contents as stored
        (not through a repository's filters or textconv); past the scan's deadline, one
        finding refusing the whole change: it is never passed unscanned."""
        try:
            return self._scan_change(cwd, pre, time.monotonic() + self.deadline_s)
        except ScanDeadline:
            why = (
                f"could not be scanned in time (the limit is {self.deadline_s:g}s, set by "
                "REQDRIVE_SCAN_DEADLINE_S)"
            )
            return [Finding("the change", why)]

    def _scan_change(self, cwd: Path, pre: str, deadline: float) -> list[Finding]:
        """A handful of git processes whatever the number of files: the list of names, the
        staged tree with each blob's size, then the blobs a batch at a time."""
        listed = ["diff", "--cached", "--name-only", "--no-renames", "-z", pre]
        names = [n for n in self._git(listed, cwd, deadline).split("\0") if n]
        staged = self._staged_blobs(cwd, deadline)
        findings: list[Finding] = []
        wanted: dict[str, list[str]] = {}  # blob -> the added names holding it
        sizes: dict[str, int] = {}
        for name in names:
            shown = self.redactor.redact(name)
            if self.redactor.secrets_in(name):
                findings.append(Finding(shown, "its name holds a secret"))
            elif name in staged:  # absent: deleted, or a submodule commit (no content here)
                sha, size = staged[name]
                if size > MAX_SCAN_BYTES:
                    why = f"too large to scan ({size} bytes; the limit is {MAX_SCAN_BYTES})"
                    findings.append(Finding(shown, why))
                else:
                    wanted.setdefault(sha, []).append(name)
                    sizes[sha] = size
        for batch in _batches(sizes):
            for sha, data in zip(batch, self._blobs(cwd, batch, sizes, deadline), strict=True):
                problem = self.scan_bytes(data)
                if problem:
                    findings += [Finding(self.redactor.redact(n), problem) for n in wanted[sha]]
                if time.monotonic() > deadline:
                    raise ScanDeadline
        return findings

    def _git(self, args: list[str], cwd: Path, deadline: float) -> str:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ScanDeadline
        try:
            return run_git(args, cwd=cwd, timeout_s=left)
        except GitError:
            if time.monotonic() >= deadline:  # git's own timeout: the deadline, not a fault
                raise ScanDeadline from None
            raise

    def _staged_blobs(self, cwd: Path, deadline: float) -> dict[str, tuple[str, int]]:
        """Every staged file's blob and size, by name (from the index written as a tree)."""
        tree = self._git(["write-tree"], cwd, deadline)
        listing = self._git(["ls-tree", "-r", "-l", "-z", "--full-tree", tree], cwd, deadline)
        staged = {}
        for entry in (e for e in listing.split("\0") if e):
            info, _, name = entry.partition("\t")
            _mode, kind, sha, size = info.split()
            if kind == "blob":
                staged[name] = (sha, int(size))
        return staged

    def _blobs(
        self, cwd: Path, batch: list[str], sizes: dict[str, int], deadline: float
    ) -> list[bytes]:
        """The blobs' bytes as stored, from one `git show` of them all (run_git decodes with
        surrogateescape, which round-trips; only the last blob's trailing newlines are lost,
        and they hide nothing)."""
        shown = self._git(["show", *batch], cwd, deadline)
        data = shown.encode("utf-8", errors="surrogateescape")
        blobs, at = [], 0
        for sha in batch:
            blobs.append(data[at : at + sizes[sha]])
            at += sizes[sha]
        return blobs

    def scan_bytes(self, data: bytes, depth: int = 0) -> str | None:
        """Why these bytes may not be committed, or None."""
        for view in (data, WHITESPACE_RE.sub(b"", data)):
            for needle, how in self._needles.items():
                if needle in view:
                    return f"holds a secret ({how})"
        if any(pattern.search(data) for pattern in self._short):
            return "holds a secret (plainly)"
        return self._scan_packed(data, depth)

    def _scan_packed(self, data: bytes, depth: int) -> str | None:
        if depth >= 2:
            return None
        unpacked = 0  # all of a file's streams together: many small ones are a bomb too
        try:
            for inner in _unpacked(data):
                unpacked += len(inner)
                if unpacked > MAX_SCAN_BYTES:
                    raise _TooLarge
                problem = self.scan_bytes(inner, depth + 1)
                if problem:
                    return f"{problem}, compressed"
        except UnscannableStream as error:
            return str(error)
        except UNPACK_ERRORS:
            return "a compressed file that cannot be unpacked to scan"
        except _TooLarge:
            return f"unpacks to more than {MAX_SCAN_BYTES} bytes; too large to scan"
        return None


class _TooLarge(Exception):
    pass


def _unpacked(data: bytes) -> Iterable[bytes]:
    """The contents of a compressed file, a zip archive's members, the streams inside a PNG or
    PDF, never more than MAX_SCAN_BYTES each (a decompression bomb is refused, not expanded);
    nothing for other files."""
    for magic, make in UNPACKERS.items():
        if data.startswith(magic):
            yield _bounded(make().decompress(data, MAX_SCAN_BYTES + 1))
            return
    if data.startswith(ZIP_MAGIC):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                with archive.open(info) as member:  # RuntimeError when encrypted
                    yield _bounded(member.read(MAX_SCAN_BYTES + 1))
        return
    # A PNG's text chunks and image data, a PDF's streams: deflated inside the file.
    for stream in packed_streams(data, MAX_SCAN_BYTES):
        yield _bounded(stream)


def _bounded(data: bytes) -> bytes:
    if len(data) > MAX_SCAN_BYTES:
        raise _TooLarge
    return data


def _batches(sizes: dict[str, int]) -> Iterator[list[str]]:
    """Blobs in groups of at most BATCH_BLOBS and BATCH_BYTES (one blob may exceed it alone):
    few git processes, and never much of the change in memory at once."""
    batch: list[str] = []
    total = 0
    for sha, size in sizes.items():
        if batch and (len(batch) >= BATCH_BLOBS or total + size > BATCH_BYTES):
            yield batch
            batch, total = [], 0
        batch.append(sha)
        total += size
    if batch:
        yield batch
