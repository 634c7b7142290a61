"""`reqdrive replay` posts a stored payload signed as GitHub signs it, to a real server."""

from __future__ import annotations

import hashlib
import hmac
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bot.ops.startup import StackLock
from tests.support.ports import closed_port, free_port
from tests.support.webhooks import EXAMPLES

pytestmark = pytest.mark.e2e

REQDRIVE = str(Path(sys.executable).parent / "reqdrive")
LABELED = EXAMPLES / "issues" / "labeled.payload.json"
SECRET = "e2e-replay-secret"
START_TIMEOUT_S = 90.0


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GITHUB_", "REQDRIVE_")) and k not in ("REDIS_URL", "PORT")
    }
    return {**env, **extra}


def _replay(
    url: str, *extra: str, secret: str = SECRET, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [REQDRIVE, "replay", "issues", str(LABELED), "--url", url, *extra],
        cwd=cwd,
        env=_env(GITHUB_WEBHOOK_SECRET=secret) if secret else _env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def server_url(redis_url: str, tmp_path: Path) -> Iterator[str]:
    """The production web server (`reqdrive serve`) on a free port, against the test Redis."""
    port = free_port()
    env = _env(REDIS_URL=redis_url, GITHUB_WEBHOOK_SECRET=SECRET)
    with (
        (tmp_path / "serve.log").open("wb") as log,
        subprocess.Popen(
            [REQDRIVE, "serve", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        ) as server,
    ):
        try:
            _wait_healthy(port, server, tmp_path / "serve.log")
            yield f"http://127.0.0.1:{port}/webhook"
        finally:
            server.terminate()
            server.wait(timeout=60)


def _wait_healthy(port: int, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert server.poll() is None, log.read_text()
        try:
            health = f"http://127.0.0.1:{port}/healthz"
            with urllib.request.urlopen(health, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    pytest.fail(f"reqdrive serve never answered /healthz:\n{log.read_text()}")


def test_signed_replay_is_accepted_by_the_server(server_url: str) -> None:
    result = _replay(server_url)
    assert result.returncode == 0, result.stderr
    status, _, body = result.stdout.partition("\n")
    # The example's "bug" label is not the trigger label: verified, understood, nothing to do.
    assert status == "204"
    assert body == ""


def test_replay_with_the_wrong_secret_is_refused(server_url: str) -> None:
    result = _replay(server_url, secret="not-the-secret")
    assert result.returncode == 1
    assert result.stdout.startswith("401")


def test_replay_reads_the_secret_from_dot_env(server_url: str, tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(f"GITHUB_WEBHOOK_SECRET={SECRET}\n")
    result = _replay(server_url, secret="", cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def test_replay_without_a_secret_names_the_variable(tmp_path: Path) -> None:
    result = _replay("http://127.0.0.1:9/webhook", secret="", cwd=tmp_path)
    assert result.returncode != 0
    assert "GITHUB_WEBHOOK_SECRET" in result.stderr
    assert "Traceback" not in result.stderr


def test_replay_to_nothing_listening_fails_clearly() -> None:
    with closed_port() as port:
        result = _replay(f"http://127.0.0.1:{port}/webhook")
    assert result.returncode == 1
    assert (
        "cannot reach" in result.stderr and "is `reqdrive up` (or serve) running" in result.stderr
    )


class _Recorder(BaseHTTPRequestHandler):
    """Keeps the last request exactly as it arrived."""

    # Header names are case-insensitive in HTTP (urllib sends "X-github-event"), so the
    # message object, which looks names up that way, is kept rather than a dict.
    received: list[tuple[Message, bytes]] = []  # noqa: RUF012 - a fresh list per test server

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.headers, body))
        self.send_response(202)
        self.end_headers()
        self.wfile.write(b'{"ok": true}')

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[tuple[str, type[_Recorder]]]:
    handler = type("Recorder", (_Recorder,), {"received": []})
    with ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/webhook", handler
        finally:
            server.shutdown()
            thread.join()


def test_replay_sends_the_files_exact_bytes_with_githubs_headers(
    recorder: tuple[str, type[_Recorder]],
) -> None:
    url, handler = recorder
    result = _replay(url, "--delivery-id", "d-42")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["202", '{"ok": true}']

    (headers, body), *_ = handler.received
    assert body == LABELED.read_bytes()
    expected = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert headers["X-Hub-Signature-256"] == f"sha256={expected}"
    assert headers["X-GitHub-Event"] == "issues"
    assert headers["X-GitHub-Delivery"] == "d-42"
    assert headers["Content-Type"] == "application/json"


def test_each_replay_gets_a_fresh_delivery_id(recorder: tuple[str, type[_Recorder]]) -> None:
    url, handler = recorder
    assert _replay(url).returncode == 0
    assert _replay(url).returncode == 0
    first, second = (str(uuid.UUID(h["X-GitHub-Delivery"])) for h, _ in handler.received)
    assert first != second


def test_replay_without_url_posts_to_the_port_up_recorded(
    recorder: tuple[str, type[_Recorder]], tmp_path: Path
) -> None:
    # `up` on another port than 3000 writes its webhook URL into the work dir's lock file.
    url, handler = recorder
    lock = StackLock(tmp_path / ".reqdrive")
    lock.acquire(f"webhook URL {url}")
    try:
        result = subprocess.run(
            [REQDRIVE, "replay", "issues", str(LABELED)],
            cwd=tmp_path,
            env=_env(GITHUB_WEBHOOK_SECRET=SECRET),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        lock.release()
    assert result.returncode == 0, result.stderr
    assert len(handler.received) == 1
