"""The secret scan refuses a change holding a configured secret in any usual form, or unreadable."""

from __future__ import annotations

import base64
import bz2
import gzip
import io
import struct
import subprocess
import zipfile
import zlib
from pathlib import Path

import pytest

from worker.confine.redact import REDACTED, Redactor
from worker.verdict import secret_scan
from worker.verdict.secret_scan import SecretScanner

PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
    "LxoS2tFczGkPLPgizskuemMghRniWaoLcyehkd3qqGElvW/VDL5AaWTg0nLVkjRo\n"
    "-----END RSA PRIVATE KEY-----\n"
)
TOKEN = "ghs_" + "Q7w9E2r4T6y8U1i3O5p7A9s2D4f6G8h0J2k4"
REDIS_PASSWORD = "hunter2"


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("hello\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    return repo


def scan(repo: Path, files: dict[str, bytes]) -> list[str]:
    for name, data in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    git(repo, "add", "-A")
    redactor = Redactor([PEM, TOKEN, f"redis://:{REDIS_PASSWORD}@127.0.0.1:6379/0"])
    return [str(f) for f in SecretScanner(redactor).scan_change(repo, "HEAD")]


# Archives are built with fixed timestamps: they are test parameters, and pytest-xdist's
# workers must collect byte-identical ones (a clock second apart, they did not).
def gzipped(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def zipped(data: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        entry = zipfile.ZipInfo("inner/config.txt", (1980, 1, 1, 0, 0, 0))
        entry.compress_type = zipfile.ZIP_DEFLATED  # a ZipInfo would be stored uncompressed
        archive.writestr(entry, data)
    return buffer.getvalue()


def png(*chunks: tuple[bytes, bytes]) -> bytes:
    """A PNG of a 4x1 grey image with these chunks before its IEND (IHDR first)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 1, 8, 0, 0, 0, 0))
    body = b"".join(chunk(kind, data) for kind, data in chunks)
    return b"\x89PNG\r\n\x1a\n" + header + body + chunk(b"IEND", b"")


def pixels(data: bytes) -> list[tuple[bytes, bytes]]:
    """The image data (filter byte 0, then the bytes) split over two IDAT chunks."""
    stream = zlib.compress(b"\0" + data)
    return [(b"IDAT", stream[:10]), (b"IDAT", stream[10:])]


def pdf(stream: bytes, filters: str = "/FlateDecode") -> bytes:
    """A one-object PDF whose content stream is `stream` under these filters."""
    return (
        b"%%PDF-1.7\n1 0 obj\n<< /Length %d /Filter %s >>\nstream\n%s\nendstream\nendobj\n"
        b"trailer\n<< /Root 1 0 R >>\n%%%%EOF\n" % (len(stream), filters.encode(), stream)
    )


def wrapped(text: str, width: int) -> str:
    return "\n".join(text[i : i + width] for i in range(0, len(text), width))


@pytest.mark.parametrize(
    ("content", "how"),
    [
        (PEM.encode(), "plainly"),
        # The key spans lines, indented in a YAML block and with Windows line ends.
        (("key: |\n" + "".join(f"  {line}\r\n" for line in PEM.splitlines())).encode(), "plainly"),
        (base64.b64encode(PEM.encode()), "base64-encoded"),
        # Wrapped at 76 columns as MIME does, after some leading bytes (another alignment).
        (wrapped(base64.b64encode(b"xy" + PEM.encode()).decode(), 76).encode(), "base64-encoded"),
        (f"token = '{TOKEN}'\n".encode(), "plainly"),
        (f"T={TOKEN.encode().hex()}".encode(), "hex-encoded"),
        # The url-safe alphabet (labelled base64 when the two encodings coincide).
        (base64.urlsafe_b64encode(b"x" + PEM.encode()), "base64"),
        (b"\0\x01binary" + TOKEN.encode() + b"\xff\0", "plainly"),
        (gzipped(f"{TOKEN}\n".encode()), "plainly), compressed"),
        (zipped(base64.b64encode(PEM.encode())), "base64-encoded), compressed"),
        (bz2.compress(PEM.encode()), "plainly), compressed"),
        (f"password: {REDIS_PASSWORD}\n".encode(), "plainly"),
        # Compressed inside common binary formats: a PNG's text chunks and image data, a
        # PDF's streams (and a stream with its dictionary's filters in an array).
        (png((b"zTXt", b"Comment\0\0" + zlib.compress(PEM.encode()))), "plainly), compressed"),
        (png((b"iTXt", b"Key\0\1\0en\0\0" + zlib.compress(TOKEN.encode()))), "plainly), comp"),
        (png(*pixels(TOKEN.encode())), "plainly), compressed"),
        (pdf(zlib.compress(b"BT (" + TOKEN.encode() + b") Tj ET")), "plainly), compressed"),
        (pdf(zlib.compress(base64.b64encode(PEM.encode())), "[/FlateDecode]"), "base64-encoded)"),
    ],
)
def test_a_configured_secret_in_any_usual_form_is_found(
    repo: Path, content: bytes, how: str
) -> None:
    findings = scan(repo, {"leak.bin": content})
    assert len(findings) == 1
    assert findings[0].startswith(f"leak.bin: holds a secret ({how}")


def test_a_secret_in_a_file_name_is_refused_and_named_redacted(repo: Path) -> None:
    assert scan(repo, {f"{TOKEN}.txt": b""}) == [f"{REDACTED}.txt: its name holds a secret"]


def test_ordinary_files_pass(repo: Path) -> None:
    ordinary = {
        # The short password only inside longer words.
        "app.py": b"def hunter22():\n    return 'hunter2x'\n",
        "data.bin": bytes(range(256)) * 100,
        "archive.zip": zipped(b"nothing to see"),
        "image.png": png(
            (b"zTXt", b"Comment\0\0" + zlib.compress(b"drawn by hand")),
            *pixels(b"\x10\x20\x30\x40"),
        ),
        "doc.pdf": pdf(zlib.compress(b"BT (Hello) Tj ET")),
        "photo.pdf": pdf(b"\xff\xd8\xff\xe0 jpeg bytes", "/DCTDecode"),
    }
    assert scan(repo, ordinary) == []


def test_files_that_cannot_be_scanned_are_refused_not_skipped(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(secret_scan, "MAX_SCAN_BYTES", 1000)
    bomb = gzip.compress(b"\0" * 100_000, mtime=0)  # small as stored, too large unpacked
    findings = scan(
        repo,
        {
            "big.txt": b"x" * 2000,
            "bomb.gz": bomb,
            "broken.gz": b"\x1f\x8b" + b"garbage" * 10,
            "broken.png": png((b"zTXt", b"Comment\0\0not zlib")),
            "cut.png": png(*pixels(b"x"))[:40],
            "lzw.pdf": pdf(b"\x80\x0b\x60\x50", "/LZWDecode"),
            "broken.pdf": pdf(b"not zlib"),
            # Many small streams that unpack past the limit together.
            "streams.pdf": pdf(zlib.compress(b"\0" * 600)) * 2,
        },
    )
    assert sorted(findings) == [
        "big.txt: too large to scan (2000 bytes; the limit is 1000)",
        "bomb.gz: unpacks to more than 1000 bytes; too large to scan",
        "broken.gz: a compressed file that cannot be unpacked to scan",
        "broken.pdf: a compressed file that cannot be unpacked to scan",
        "broken.png: a compressed file that cannot be unpacked to scan",
        "cut.png: a compressed file that cannot be unpacked to scan",
        "lzw.pdf: a PDF stream filtered with /LZWDecode, which the scan cannot undo",
        "streams.pdf: unpacks to more than 1000 bytes; too large to scan",
    ]
