"""The web process as `reqdrive serve` runs it, under clients that hold bodies open."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import psutil
import pytest

from bot.cli import web_server_argv
from tests.support import webhooks
from tests.support.ports import free_port

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 2
BUDGET_MIB = 32
# More clients holding bodies open than a thread-per-request server has threads: a held body
# must cost no thread.
HELD_BODIES = 136
CHUNK_BYTES = 64 * 1024


@pytest.fixture
def server(redis_url: str, tmp_path: Path) -> Iterator[tuple[int, int]]:
    port = free_port()
    env = {**os.environ, "GITHUB_WEBHOOK_SECRET": webhooks.SECRET, "REDIS_URL": redis_url,
           "REQDRIVE_APP_SLUG": "reqdrive", "WEB_CONCURRENCY": "1",
           "REQDRIVE_BODY_DEADLINE_S": str(DEADLINE_S),
           "REQDRIVE_BODY_BUDGET_MIB": str(BUDGET_MIB)}  # fmt: skip
    log = (tmp_path / "web.log").open("wb")
    proc = subprocess.Popen(web_server_argv("127.0.0.1", port), cwd=ROOT, env=env,
                            stdout=log, stderr=log)  # fmt: skip
    try:
        for _ in range(300):  # bounded: 30 s
            if b"Started worker-" in (tmp_path / "web.log").read_bytes():
                try:
                    status, _ = raw_request(port, b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
                    if status == 200:
                        break
                except OSError:
                    pass
            time.sleep(0.1)
        else:
            raise RuntimeError((tmp_path / "web.log").read_text())
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def raw_request(port: int, data: bytes, timeout: float = 5.0) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        return read_status(sock)


def read_status(sock: socket.socket) -> tuple[int, bytes]:
    reply = b""
    while b"\r\n" not in reply:
        more = sock.recv(4096)
        if not more:
            break
        reply += more
    return int(reply.split(b" ", 2)[1]), reply


def delivery(port: int) -> int:
    body = webhooks.labeled("reqdrive")
    headers = webhooks.headers("issues", body, delivery_id=str(uuid.uuid4()))
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    head = f"POST /webhook HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n{lines}\r\n"
    return raw_request(port, head.encode() + body)[0]


def slow_client(port: int, declared: int, sent: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = ("POST /webhook HTTP/1.1\r\nHost: t\r\nX-GitHub-Event: push\r\n"
            f"X-GitHub-Delivery: {uuid.uuid4()}\r\nContent-Length: {declared}\r\n\r\n")  # fmt: skip
    sock.sendall(head.encode() + sent)
    return sock


def test_held_bodies_neither_stall_healthz_nor_real_deliveries(server: tuple[int, int]) -> None:
    port = server[0]
    with ExitStack() as held:
        slow = [held.enter_context(slow_client(port, 1000, b"{")) for _ in
                range(HELD_BODIES)]  # fmt: skip
        time.sleep(1)
        # Held bodies hold no thread: /healthz still answers, and a delivery is answered at
        # once (503 when the byte budget is spent: redeliver), never stalled.
        assert raw_request(port, b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")[0] == 200
        assert delivery(port) in {202, 503}  # answered within raw_request's 5 s
        # Any the server refused (the budget spent) were answered 503, not left waiting.
        refused = [sock for sock in slow if _answered(sock)]
        assert {read_status(sock)[0] for sock in refused} <= {503}
        for sock in [sock for sock in slow if sock not in refused][:10]:
            sock.close()  # a few holders leave: their bytes serve GitHub again
        time.sleep(0.5)
        assert delivery(port) == 202


def test_a_body_trickled_in_is_refused_at_the_deadline(server: tuple[int, int]) -> None:
    with slow_client(server[0], 4 * 1024 * 1024, b"{") as sock:
        sock.settimeout(1)
        started = time.monotonic()
        status = None
        for _ in range(4 * (DEADLINE_S + 3)):  # bounded: one chunk every 0.25 s
            if _answered(sock):
                status = read_status(sock)[0]
                break
            sock.sendall(b" " * CHUNK_BYTES)
            time.sleep(0.25)
        assert status == 408
        assert time.monotonic() - started >= DEADLINE_S


def _answered(sock: socket.socket) -> bool:
    ready, _, _ = select.select([sock], [], [], 0)
    return bool(ready)


def test_many_large_unverified_bodies_stay_within_the_budget(server: tuple[int, int]) -> None:
    port, pid = server
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    before = sum(p.memory_info().rss for p in procs)
    declared = 25 * 1024 * 1024
    chunk = b" " * (1024 * 1024)
    with ExitStack() as held:
        live = [held.enter_context(slow_client(port, declared, b"")) for _ in range(12)]
        peak = before
        for _ in range(20):  # 20 MiB of each 25 MiB body, then hold them open
            for sock in list(live):
                sock.settimeout(0.5)
                try:
                    sock.sendall(chunk)
                except OSError:
                    live.remove(sock)  # refused (503): the server reads no more of it
            peak = max(peak, sum(p.memory_info().rss for p in procs))
        time.sleep(0.5)
        peak = max(peak, sum(p.memory_info().rss for p in procs))
    # Without the budget this grew by 12 x 25 MiB; a margin for threads and allocator slack.
    assert peak - before < (2 * BUDGET_MIB + 64) * 1024 * 1024
