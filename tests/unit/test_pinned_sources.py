"""tests/support/pinned_sources.py: a pinned archive is fetched once, checked, and unpacked
without leaving its folder."""

from __future__ import annotations

import hashlib
import io
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support import pinned_sources
from tests.support.pinned_sources import SourceUnavailable, fetch_pinned, unpack


def tar_gz(members: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return buffer.getvalue()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setattr(pinned_sources, "CACHE_DIR", folder)
    return folder


@pytest.fixture
def served() -> Iterator[tuple[dict[str, bytes], list[str]]]:
    """A loopback HTTP server answering the files in the dict; the list records requests."""
    files: dict[str, bytes] = {}
    requests: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requests.append(self.path)
            body = files.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    files["__base__"] = f"http://127.0.0.1:{server.server_port}".encode()
    yield files, requests
    server.shutdown()
    server.server_close()


def allow_http(monkeypatch: pytest.MonkeyPatch) -> None:
    # The tests serve on loopback over plain http; real pins are https.
    monkeypatch.setattr(pinned_sources, "_scheme_ok", lambda url: True)


def test_an_archive_is_downloaded_once_checked_and_kept_under_its_hash(
    cache: Path, served: tuple[dict[str, bytes], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    allow_http(monkeypatch)
    files, requests = served
    data = tar_gz({"demo-1.0/setup.py": b"print('hi')\n"})
    files["/p/demo-1.0.tar.gz"] = data
    digest = hashlib.sha256(data).hexdigest()
    url = files["__base__"].decode() + "/p/demo-1.0.tar.gz"

    first = fetch_pinned(url, digest)
    second = fetch_pinned(url, digest.upper())

    assert first == second == cache / digest / "demo-1.0.tar.gz"
    assert first.read_bytes() == data
    assert requests == ["/p/demo-1.0.tar.gz"]  # the second call found it cached


def test_a_download_with_another_hash_is_refused_and_not_kept(
    cache: Path, served: tuple[dict[str, bytes], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    allow_http(monkeypatch)
    files, _ = served
    files["/p/demo-1.0.tar.gz"] = b"not what was pinned"
    pin = hashlib.sha256(b"what was pinned").hexdigest()
    url = files["__base__"].decode() + "/p/demo-1.0.tar.gz"

    with pytest.raises(SourceUnavailable, match="not the pinned"):
        fetch_pinned(url, pin)
    assert [p.name for p in (cache / pin).iterdir()] == [".lock"]


def test_an_unreachable_registry_fails_with_what_to_do(
    cache: Path, served: tuple[dict[str, bytes], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    allow_http(monkeypatch)
    files, _ = served
    url = files["__base__"].decode() + "/p/missing-1.0.tar.gz"

    with pytest.raises(SourceUnavailable, match=r"could not download .* with network"):
        fetch_pinned(url, "0" * 64)


def test_only_https_urls_are_fetched(cache: Path) -> None:
    with pytest.raises(ValueError, match="https"):
        fetch_pinned("http://example.invalid/demo-1.0.tar.gz", "0" * 64)


def test_unpack_returns_the_sdists_top_folder(tmp_path: Path) -> None:
    archive = tmp_path / "demo-1.0.tar.gz"
    archive.write_bytes(tar_gz({"demo-1.0/src/demo.py": b"x = 1\n"}, {"demo-1.0/link": "src"}))

    root = unpack(archive, tmp_path / "out")

    assert root == tmp_path / "out" / "demo-1.0"
    assert (root / "src/demo.py").read_text() == "x = 1\n"


def test_unpack_reads_zip_archives(tmp_path: Path) -> None:
    archive = tmp_path / "demo-1.0.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("demo-1.0/demo.py", "x = 1\n")

    assert (unpack(archive, tmp_path / "out") / "demo.py").read_text() == "x = 1\n"


@pytest.mark.parametrize(
    ("members", "links"),
    [
        ({"/etc/evil": b"x"}, {}),
        ({"demo/../../evil": b"x"}, {}),
        ({"demo/ok": b"x"}, {"demo/out": "../../etc"}),
        ({"demo/ok": b"x"}, {"demo/abs": "/etc/passwd"}),
    ],
)
def test_unpack_refuses_a_tar_member_out_of_its_folder(
    tmp_path: Path, members: dict[str, bytes], links: dict[str, str]
) -> None:
    archive = tmp_path / "evil.tar.gz"
    archive.write_bytes(tar_gz(members, links))

    with pytest.raises(SourceUnavailable, match="refusing"):
        unpack(archive, tmp_path / "out")
    assert not (tmp_path / "evil").exists() and not (tmp_path / "out" / "demo" / "ok").exists()


def test_unpack_refuses_a_zip_member_out_of_its_folder(tmp_path: Path) -> None:
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("../evil", "x")

    with pytest.raises(SourceUnavailable, match="refusing"):
        unpack(archive, tmp_path / "out")
    assert not (tmp_path / "evil").exists()
