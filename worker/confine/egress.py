"""The egress proxy: a sandboxed agent's only way out, to the addresses its network setting allows.

Every sandbox has a network namespace of its own (only loopback). A relay inside it
(egress_relay.py) forwards 127.0.0.1:RELAY_PORT to a Unix socket bound in from here, where this
proxy answers HTTP `CONNECT host:port` (HTTPS) and absolute-form requests (`POST
http://host:port/...`). It connects to the call's named endpoints (the model's API, the
registries preset, REQDRIVE_SANDBOX_API_HOSTS) and, with the `open` network, to any public
address (egress_rules.py); everything else is refused with a line in the call's log. Requests
are parsed by the standard library's http.server; after the head, bytes are copied as they are.
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
from typing import Any
from urllib.parse import SplitResult, urlsplit

from worker.confine.egress_rules import (
    Address,
    Endpoint,
    connect_first,
    host_addresses,
    public_targets,
)

LOG = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 30.0
COPY_CHUNK = 64 * 1024
# Headers meant for the proxy or for this one connection, not for the API.
HOP_HEADERS = frozenset({"proxy-connection", "proxy-authorization", "connection", "keep-alive"})
MAX_TARGET_CHARS = 200  # of an agent-chosen target quoted in the log
# Each connection is two threads of the worker (a tunnel copies both ways): an agent opening
# thousands must not exhaust it. A CLI keeps a handful open; past this many at once, a new one
# is answered 503 and closed by the accepting thread itself, before any thread is made for it.
MAX_CONNECTIONS = 64
# Connections waiting to be accepted (socketserver's default, 5, would make a burst wait).
ACCEPT_BACKLOG = 128
ACCEPT_RETRY_S = 0.05  # after an accept that failed (no descriptor left) before trying again
BUSY_READS = 4  # chunks of a turned-away request read before answering, at most
BUSY_ANSWER = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s\n"
)
# A client has this long to send its request head; an open tunnel has no idle limit (a model
# may think for minutes before it streams).
HEAD_TIMEOUT_S = 30.0
# Refusals the worker's own log records per call (the call's log gets every one).
MAX_LOGGED_REFUSALS = 20
SOCKET_NAME = "egress.sock"
DEFAULT_PORTS = {"http": 80, "https": 443}

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
    """The proxy for one call, on a Unix socket in a private folder of its own.

    `allowed` endpoints are connected to by name (the operator named them); with `public`,
    any other name is resolved and connected to only at a public address (egress_rules.py).
    """

    def __init__(
        self,
        allowed: Iterable[Endpoint],
        report: Report,
        *,
        public: bool = False,
        max_connections: int = MAX_CONNECTIONS,
        head_timeout_s: float = HEAD_TIMEOUT_S,
    ) -> None:
        self.allowed = frozenset(allowed)
        self.report = report
        self.public = public
        # The host's own addresses, read once per call: refused even where they are public.
        self.own: frozenset[Address] = host_addresses() if public else frozenset()
        self.max_connections = max_connections
        self.slots = threading.BoundedSemaphore(max_connections)
        self.head_timeout_s = head_timeout_s
        self._refused = 0
        self._folder = Path(tempfile.mkdtemp(prefix="reqdrive-egress-"))  # mode 0700
        self.socket_path = self._folder / SOCKET_NAME
        self._server = _ProxyServer(str(self.socket_path), self)
        self._thread = threading.Thread(target=self._server.serve, name="egress-proxy", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop accepting, end every tunnel still open, remove the socket."""
        self._server.stop()
        self._server.close_tunnels()
        self._thread.join()
        shutil.rmtree(self._folder, ignore_errors=True)

    def connect(self, target: Endpoint) -> socket.socket | str:
        """A connection to target, or why it is refused; OSError when it does not answer."""
        if target in self.allowed:
            return socket.create_connection(target, timeout=CONNECT_TIMEOUT_S)
        if not self.public:
            allowed = ", ".join(sorted(endpoint_text(e) for e in self.allowed))
            return f"not the model's API or another allowed endpoint (allowed: {allowed})"
        # Resolved once, here; the connection goes to the address judged, never to the name
        # again (which a rebinding DNS server could answer differently the second time).
        targets, why = public_targets(*target, self.own)
        if not targets:
            return f"not a public address: {why}"
        return connect_first(targets, CONNECT_TIMEOUT_S)

    def refuse(self, method: str, target: str, why: str) -> str:
        what = f"{method} {target[:MAX_TARGET_CHARS]}".rstrip()
        line = f"[reqdrive] egress refused: {what}: {why}"
        self._refused += 1
        if self._refused <= MAX_LOGGED_REFUSALS:
            target = target[:MAX_TARGET_CHARS]
            LOG.warning("egress refused", extra={"method": method, "target": target})
        self.report(line)
        return line

    def turn_away(self, request: socket.socket) -> None:
        """A connection past the slots: answered 503 without waiting for its request, closed."""
        why = f"more than {self.max_connections} connections at once"
        line = self.refuse("a connection", "", why).encode()
        with contextlib.suppress(OSError):  # a client that is gone, not reading or writing
            # What it has sent is read (a Unix socket closed with unread bytes resets the
            # answer), without waiting for more.
            for _ in range(BUSY_READS):
                if not request.recv(COPY_CHUNK, socket.MSG_DONTWAIT):
                    break
        with contextlib.suppress(OSError):
            request.send(BUSY_ANSWER % (len(line) + 1, line), socket.MSG_DONTWAIT)


@contextlib.contextmanager
def egress_proxy(
    allowed: Iterable[Endpoint], report: Report, *, public: bool = False
) -> Iterator[EgressProxy]:
    """A running proxy for the length of the block."""
    proxy = EgressProxy(allowed, report, public=public)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()


class _ProxyServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = ACCEPT_BACKLOG

    def __init__(self, path: str, proxy: EgressProxy) -> None:
        self.proxy = proxy
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        super().__init__(path, _ProxyHandler)

    def serve(self) -> None:
        """Accept until stop(). Not serve_forever: it polls for shutdown, and every agent call
        would wait for its poll at the end (socketserver's default: half a second)."""
        while not self._stopping.is_set():
            try:
                request, address = self.get_request()
            except OSError:  # stopped; or out of descriptors for a moment
                self._stopping.wait(ACCEPT_RETRY_S)
                continue
            try:
                self.process_request(request, address)
            except Exception:
                self.handle_error(request, address)

    def stop(self) -> None:
        """End serve() at once: shutting the listening socket wakes its blocked accept."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            self.socket.shutdown(socket.SHUT_RDWR)
        self.server_close()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Take a slot before making the connection's thread; with none left, refuse here, in
        the accepting thread, so idle connections cannot pile up threads in the worker."""
        if not self.proxy.slots.acquire(blocking=False):
            self.proxy.turn_away(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread could be made: the slot is not held by anyone
            self.proxy.slots.release()
            self.shutdown_request(request)
            raise

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection in its thread; its slot is free before it is closed."""
        try:
            super().finish_request(request, client_address)
        finally:
            self.proxy.slots.release()

    def track(self, *sockets: socket.socket) -> None:
        with self._lock:
            if not self._stopping.is_set():
                self._open.update(sockets)
                return
        for sock in sockets:  # the proxy closed while this connection was being made
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

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
        # A head not sent within this time: closed, nothing answered, the slot freed.
        self.connection.settimeout(self.server.proxy.head_timeout_s)

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
            self.server.forget(upstream, self.connection)
            upstream.close()
            return
        self._tunnel(upstream)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def _open(self, target: Endpoint) -> socket.socket | None:
        """A connection to an allowed target; None once the client has been told why not."""
        proxy = self.server.proxy
        shown = endpoint_text(target)
        try:
            upstream = proxy.connect(target)
        except OSError as error:
            self._answer(502, proxy.refuse(self.command, shown, f"cannot connect ({error})"))
            return None
        if isinstance(upstream, str):
            self._answer(403, proxy.refuse(self.command, shown, upstream))
            return None
        upstream.settimeout(None)
        # Known to the server before the client hears anything: a close() from now on ends
        # this tunnel too, however the threads interleave.
        self.server.track(upstream, self.connection)
        return upstream

    def _tunnel(self, upstream: socket.socket) -> None:
        """Copy bytes both ways until both sides are done (or the proxy closes)."""
        self.close_connection = True
        self.connection.settimeout(None)
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
