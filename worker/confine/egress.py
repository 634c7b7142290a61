"""The egress proxy: a sandboxed agent's only way out, to its model's API and nowhere else.

With `REQDRIVE_SANDBOX_NETWORK=api` the agent runs in a network namespace of its own (only
loopback). A relay inside it (egress_relay.py) forwards 127.0.0.1:RELAY_PORT to a Unix
socket bound in from here, where this proxy answers HTTP `CONNECT host:port` (HTTPS) and
absolute-form requests (`POST http://host:port/...`, a plain-HTTP base URL such as a local
model server) for the allowed endpoints only. Everything else is refused with a line in the
call's log. Requests are parsed by the standard library's http.server; after the head, bytes
are copied as they are.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import socket
import socketserver
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

LOG = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 30.0
# How often the serving thread looks for shutdown: socketserver's default (0.5 s) would be
# added to every agent call, which waits for the proxy to stop.
POLL_S = 0.02
COPY_CHUNK = 64 * 1024
# Headers meant for the proxy or for this one connection, not for the API.
HOP_HEADERS = frozenset({"proxy-connection", "proxy-authorization", "connection", "keep-alive"})
MAX_TARGET_CHARS = 200  # of an agent-chosen target quoted in the log
# Each connection is a thread of the worker: an agent opening thousands must not exhaust it.
# A CLI keeps a handful open; past this many at once, new ones are refused (503).
MAX_CONNECTIONS = 64
# A client has this long to send its request head; an open tunnel has no idle limit (a model
# may think for minutes before it streams).
HEAD_TIMEOUT_S = 30.0
# Refusals the worker's own log records per call (the call's log gets every one).
MAX_LOGGED_REFUSALS = 20
SOCKET_NAME = "egress.sock"
DEFAULT_PORTS = {"http": 80, "https": 443}

Endpoint = tuple[str, int]  # (host in lower case, port)
Report = Callable[[str], None]


def endpoint(text: str) -> Endpoint:
    """`host:port` (or `[v6]:port`) as an Endpoint; ValueError if it is not one."""
    parts = urlsplit(f"//{text.strip()}")
    port = _port(parts, text)
    if not parts.hostname or port is None or parts.path or parts.query:
        raise ValueError(f"not a host:port: {text!r}")
    return parts.hostname.rstrip(".").lower(), port


def url_endpoint(url: str) -> Endpoint:
    """The endpoint an API base URL talks to (`https://api.anthropic.com` -> port 443)."""
    parts = urlsplit(url.strip())
    port = _port(parts, url) or DEFAULT_PORTS.get(parts.scheme)
    if not parts.hostname or port is None or parts.scheme not in DEFAULT_PORTS:
        raise ValueError(f"not an http(s) URL: {url!r}")
    return parts.hostname.rstrip(".").lower(), port


def _port(parts: SplitResult, text: str) -> int | None:
    """urlsplit's port, which raises ValueError for `host:http` or 99999."""
    try:
        return parts.port
    except ValueError:
        raise ValueError(f"not a host:port: {text!r}") from None


def endpoint_text(value: Endpoint) -> str:
    host, port = value
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class EgressProxy:
    """The proxy for one agent call, on a Unix socket in a private folder of its own."""

    def __init__(
        self,
        allowed: Iterable[Endpoint],
        report: Report,
        *,
        max_connections: int = MAX_CONNECTIONS,
        head_timeout_s: float = HEAD_TIMEOUT_S,
    ) -> None:
        self.allowed = frozenset(allowed)
        self.report = report
        self.max_connections = max_connections
        self.slots = threading.BoundedSemaphore(max_connections)
        self.head_timeout_s = head_timeout_s
        self._refused = 0
        self._folder = Path(tempfile.mkdtemp(prefix="reqdrive-egress-"))  # mode 0700
        self.socket_path = self._folder / SOCKET_NAME
        self._server = _ProxyServer(str(self.socket_path), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(POLL_S,), name="egress-proxy", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop accepting, end every tunnel still open, remove the socket."""
        self._server.shutdown()
        self._server.server_close()
        self._server.close_tunnels()
        self._thread.join()
        shutil.rmtree(self._folder, ignore_errors=True)

    def allows(self, target: Endpoint) -> bool:
        return target in self.allowed

    def refuse(self, method: str, target: str, why: str) -> str:
        line = f"[reqdrive] egress refused: {method} {target[:MAX_TARGET_CHARS]}: {why}"
        self._refused += 1
        if self._refused <= MAX_LOGGED_REFUSALS:
            target = target[:MAX_TARGET_CHARS]
            LOG.warning("egress refused", extra={"method": method, "target": target})
        self.report(line)
        return line


@contextlib.contextmanager
def egress_proxy(allowed: Iterable[Endpoint], report: Report) -> Iterator[EgressProxy]:
    """A running proxy for the length of the block."""
    proxy = EgressProxy(allowed, report)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()


class _ProxyServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, path: str, proxy: EgressProxy) -> None:
        self.proxy = proxy
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        super().__init__(path, _ProxyHandler)

    def track(self, *sockets: socket.socket) -> None:
        with self._lock:
            self._open.update(sockets)

    def forget(self, *sockets: socket.socket) -> None:
        with self._lock:
            self._open.difference_update(sockets)

    def close_tunnels(self) -> None:
        with self._lock:
            left, self._open = list(self._open), set()
        for sock in left:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class _ProxyHandler(BaseHTTPRequestHandler):
    """One client connection: a CONNECT tunnel, or one plain-HTTP request forwarded."""

    server: _ProxyServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.proxy.head_timeout_s)

    def handle(self) -> None:
        slots = self.server.proxy.slots
        if not slots.acquire(blocking=False):
            self._refuse_busy()
            return
        try:
            super().handle()  # a head not sent within the timeout: closed, nothing answered
        finally:
            slots.release()

    def _refuse_busy(self) -> None:
        """Read the request head (closing on unread bytes would reset the answer), say 503."""
        try:
            self.raw_requestline = self.rfile.readline(65537)
        except OSError:
            return
        if self.parse_request():  # else it has answered 400 itself
            why = f"more than {self.server.proxy.max_connections} connections at once"
            self._answer(503, self.server.proxy.refuse(self.command, self.path, why))

    def do_CONNECT(self) -> None:
        try:
            target = endpoint(self.path)
        except ValueError:
            self._answer(400, self.server.proxy.refuse("CONNECT", self.path, "not a host:port"))
            return
        upstream = self._open(target)
        if upstream is None:
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self._tunnel(upstream)

    def do_GET(self) -> None:
        """An absolute-form request (`GET http://host:port/path`): sent on in origin form, with
        `Connection: close`, so the next request on this connection cannot name another host."""
        parts = urlsplit(self.path)
        if parts.scheme != "http" or not parts.hostname:
            why = "only CONNECT and absolute http:// requests are proxied"
            self._answer(400, self.server.proxy.refuse(self.command, self.path, why))
            return
        try:
            target = url_endpoint(self.path)
        except ValueError:
            self._answer(400, self.server.proxy.refuse(self.command, self.path, "bad port"))
            return
        upstream = self._open(target)
        if upstream is None:
            return
        origin = parts.path or "/"
        if parts.query:
            origin += f"?{parts.query}"
        head = [f"{self.command} {origin} {self.request_version}"]
        head += [f"{k}: {v}" for k, v in self.headers.items() if k.lower() not in HOP_HEADERS]
        head += ["Connection: close", "", ""]
        try:
            upstream.sendall("\r\n".join(head).encode("latin-1"))
        except OSError:
            upstream.close()
            return
        self._tunnel(upstream)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def _open(self, target: Endpoint) -> socket.socket | None:
        """A connection to an allowed target; None once the client has been told why not."""
        proxy = self.server.proxy
        shown = endpoint_text(target)
        if not proxy.allows(target):
            allowed = ", ".join(sorted(endpoint_text(e) for e in proxy.allowed))
            why = f"not the model's API (allowed: {allowed})"
            self._answer(403, proxy.refuse(self.command, shown, why))
            return None
        try:
            upstream = socket.create_connection(target, timeout=CONNECT_TIMEOUT_S)
        except OSError as error:
            self._answer(502, proxy.refuse(self.command, shown, f"cannot connect ({error})"))
            return None
        upstream.settimeout(None)
        return upstream

    def _tunnel(self, upstream: socket.socket) -> None:
        """Copy bytes both ways until both sides are done (or the proxy closes)."""
        self.close_connection = True
        self.connection.settimeout(None)
        self.server.track(upstream, self.connection)
        back = threading.Thread(
            target=_copy, args=(upstream, self.connection), name="egress-tunnel", daemon=True
        )
        back.start()
        try:
            # rfile first: it may already hold bytes sent right after the request head.
            while chunk := self.rfile.read1(COPY_CHUNK):
                upstream.sendall(chunk)
            upstream.shutdown(socket.SHUT_WR)
        except (OSError, ValueError):  # a side closed (ValueError: the proxy closed rfile)
            pass
        back.join()
        self.server.forget(upstream, self.connection)
        upstream.close()

    def _answer(self, status: int, line: str) -> None:
        body = f"{line}\n".encode()
        self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        # http.server writes every request to stderr; refusals are reported above instead
        # (and a Unix socket's client address is empty, which its default would index).
        return


def _copy(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(COPY_CHUNK):
            target.sendall(chunk)
        target.shutdown(socket.SHUT_WR)
    except OSError:
        return
