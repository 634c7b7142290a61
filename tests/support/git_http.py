"""git http-backend behind Basic auth: a remote that takes an installation token as GitHub does."""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.git_remote import TOKEN, Remote


class GitHttpServer(ThreadingHTTPServer):
    """git http-backend behind Basic auth, the way GitHub takes an installation token."""

    def __init__(self, root: Path, token: str) -> None:
        super().__init__(("127.0.0.1", 0), GitHttpHandler)
        self.root = root
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        self.expected = f"Basic {basic}"
        self.authorized: list[str] = []
        self.refused: list[str] = []
        exec_path = subprocess.run(
            ["git", "--exec-path"], capture_output=True, text=True, check=True, timeout=60
        ).stdout.strip()
        self.backend = Path(exec_path) / "git-http-backend"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class GitHttpHandler(BaseHTTPRequestHandler):
    server: GitHttpServer

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep test output clean

    def _serve(self) -> None:
        if self.headers.get("Authorization") != self.server.expected:
            self.server.refused.append(self.path)
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.server.authorized.append(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        output = subprocess.run(
            [str(self.server.backend)],
            input=body,
            env=self._cgi_env(len(body)),
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
        self._relay(output)

    def _cgi_env(self, length: int) -> dict[str, str]:
        path, _, query = self.path.partition("?")
        env = {
            "PATH": os.environ["PATH"],
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.environ.get("GIT_CONFIG_GLOBAL", os.devnull),
            "GIT_PROJECT_ROOT": str(self.server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": "x-access-token",  # lets http-backend accept pushes
            "REMOTE_ADDR": "127.0.0.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(length),
        }
        for header in ("Content-Encoding", "Git-Protocol"):
            if header in self.headers:
                env["HTTP_" + header.upper().replace("-", "_")] = self.headers[header]
        return env

    def _relay(self, output: bytes) -> None:
        separator = b"\r\n\r\n" if b"\r\n\r\n" in output else b"\n\n"
        head, _, payload = output.partition(separator)
        headers = [line.split(":", 1) for line in head.decode().splitlines() if ":" in line]
        status = next((int(v.split()[0]) for k, v in headers if k.lower() == "status"), 200)
        self.send_response(status)
        for key, value in headers:
            if key.lower() != "status":
                self.send_header(key, value.strip())
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def http_remote(remote: Remote) -> Iterator[tuple[str, GitHttpServer]]:
    server = GitHttpServer(remote.bare.parent, TOKEN)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"{server.base_url}/{remote.bare.name}", server
    server.shutdown()
    server.server_close()
    thread.join()
