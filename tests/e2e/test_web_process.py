"""The web process as the Procfile runs it, and its one door on a second ASGI server; real HTTP."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Queue, SimpleWorker
from rq.serializers import JSONSerializer

from bot.cli import MMAP_THRESHOLD_BYTES, web_server_argv
from bot.ops.settings import Settings
from bot.web.bodies import MAX_BODY_BYTES
from tests.support import webhooks
from tests.support.ports import closed_port, free_port
from tests.support.recording_jobs import JOB_LOG_KEY, RecordingJob

pytestmark = pytest.mark.e2e

# What `reqdrive serve` holds for bodies by default (REQDRIVE_BODY_BUDGET_MIB, _DEADLINE_S).
BODY_DEADLINE_S = float(Settings.model_fields["reqdrive_body_deadline_s"].default)
UNVERIFIED_BUDGET_BYTES = int(Settings.model_fields["reqdrive_body_budget_mib"].default) << 20

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WORKERS = 2
# The servers the web process runs on: "serve" is exactly what `reqdrive serve` (the Procfile's
# web line) execs, granian's ASGI interface; gunicorn's own ASGI worker serves the same factory,
# so a second server's way of passing bodies (lengths, chunks, disconnects) reaches the one door.
SERVERS = {
    "serve": [],  # web_server_argv(), filled in per port
    "gunicorn": [str(BIN / "gunicorn"), "--no-control-socket", "--bind", "127.0.0.1:{port}",
                 "--workers", str(WORKERS), "--worker-class", "asgi", "--asgi-lifespan", "off",
                 "bot.web.asgi:create_asgi_app()"],
}  # fmt: skip
# The log line of each worker that is ready. Both servers listen before their workers are;
# granian 2.8 hangs if SIGTERM comes while a worker is still starting, so a test server is
# used, and stopped, only once every worker has started.
WORKER_READY = {
    "gunicorn": b"Booting worker with pid",
    "serve": b"Started worker-",
}
START_TIMEOUT_S = 30.0

Reply = tuple[int, dict[str, Any]]  # the answer's decoded JSON


class WebProcess:
    """A web server serving bot.web.asgi's create_asgi_app from the environment, on a private
    port."""

    def __init__(self, server: str, redis_url: str, log: Path) -> None:
        self.port = free_port()
        env = {
            **os.environ,
            "GITHUB_WEBHOOK_SECRET": webhooks.SECRET,
            "REDIS_URL": redis_url,
            "REQDRIVE_APP_SLUG": "reqdrive",
            "WEB_CONCURRENCY": str(WORKERS),
        }
        if server == "serve":
            argv = web_server_argv("127.0.0.1", self.port)
            env["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD_BYTES)  # as _serve sets it
        else:
            argv = [arg.format(port=self.port) for arg in SERVERS[server]]
        self._ready = WORKER_READY[server]
        self._log = log.open("wb")
        self.process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=self._log, stderr=self._log)
        self._wait_until_ready(log)

    def _wait_until_ready(self, log: Path) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"web server exited:\n{log.read_text()}")
            if log.read_bytes().count(self._ready) >= WORKERS:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    return
                except OSError:
                    pass
            time.sleep(0.05)
        raise RuntimeError(f"web server did not start its workers:\n{log.read_text()}")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self._log.close()

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> Reply:  # fmt: skip
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        return response.status, json.loads(data) if data else {}

    def deliver(self, event: str, body: bytes, **kwargs: str) -> Reply:
        return self.request("POST", "/webhook", body, webhooks.headers(event, body, **kwargs))


@pytest.fixture(scope="module", params=sorted(SERVERS))
def server_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(scope="module")
def web(
    server_name: str, redis_session_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebProcess]:
    log = tmp_path_factory.mktemp("web") / f"{server_name}.log"
    server = WebProcess(server_name, redis_session_url, log)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def web_without_redis(
    server_name: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebProcess]:
    with closed_port() as port:
        log = tmp_path_factory.mktemp("web-down") / f"{server_name}.log"
        server = WebProcess(server_name, f"redis://127.0.0.1:{port}/0", log)
        yield server
        server.stop()


def queue(conn: redis.Redis) -> Queue:
    return Queue("reqdrive", connection=conn, serializer=JSONSerializer)


def test_a_trigger_is_queued_and_run_by_a_worker(web: WebProcess, redis_conn: redis.Redis) -> None:
    status, answer = web.deliver("issues", webhooks.labeled(number=3))
    assert status == 202
    assert queue(redis_conn).job_ids == answer["job_ids"]
    SimpleWorker(
        [queue(redis_conn)],
        connection=redis_conn,
        serializer=JSONSerializer,
        job_class=RecordingJob,
    ).work(burst=True)
    [entry] = [json.loads(e) for e in redis_conn.lrange(JOB_LOG_KEY, 0, -1)]
    assert (entry["job_id"], entry["requirement"]) == (answer["job_ids"][0], "ISSUE-3")


def test_fifty_concurrent_deliveries_of_one_trigger_queue_one_job(
    web: WebProcess, redis_conn: redis.Redis
) -> None:
    body = webhooks.push_of([(["docs/requirements/REQ-007-search.md"], [], [])])
    with ThreadPoolExecutor(max_workers=50) as pool:
        replies = list(
            pool.map(lambda n: web.deliver("push", body, delivery_id=f"guid-{n}"), range(50))
        )
    assert {status for status, _ in replies} == {202}
    jobs = [answer["jobs"][0] for _, answer in replies]
    assert len({job["id"] for job in jobs}) == 1
    assert sorted(job["coalesced"] for job in jobs) == [False] + [True] * 49
    assert queue(redis_conn).count == 1


def test_the_same_delivery_twice_is_one_job(web: WebProcess, redis_conn: redis.Redis) -> None:
    body = webhooks.comment("/reqdrive status")
    first = web.deliver("issue_comment", body, delivery_id="guid-twice")
    second = web.deliver("issue_comment", body, delivery_id="guid-twice")
    assert first[0] == 202
    assert second == (200, {"duplicate": True, **first[1]})
    assert queue(redis_conn).count == 1


def test_every_other_answer_of_the_table(web: WebProcess, redis_conn: redis.Redis) -> None:
    body = webhooks.labeled()
    signed = webhooks.headers("issues", body)
    unsigned = {k: v for k, v in signed.items() if k != "X-Hub-Signature-256"}
    no_delivery = {k: v for k, v in signed.items() if k != "X-GitHub-Delivery"}
    ping = webhooks.example_bytes("ping", "payload.json")
    assert web.request("POST", "/webhook", body, unsigned)[0] == 401
    assert web.request("POST", "/webhook", body + b" ", signed)[0] == 401
    assert web.request("POST", "/webhook", body, no_delivery)[0] == 400
    assert web.deliver("issues", b"[]")[0] == 400
    assert web.deliver("ping", ping)[0] == 200
    assert web.deliver("issues", webhooks.labeled("bug"))[0] == 204
    assert web.request("POST", "/webhook", b"junk", {"X-GitHub-Event": "star"})[0] == 204
    assert web.request("GET", "/healthz") == (200, {"redis": "ok"})
    assert queue(redis_conn).count == 0


def test_a_body_declared_over_25_mib_is_refused_before_it_is_sent(web: WebProcess) -> None:
    head = (
        "POST /webhook HTTP/1.1\r\nHost: localhost\r\nX-GitHub-Event: issues\r\n"
        f"Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", web.port), timeout=30) as s:
        s.sendall(head.encode())  # the body never comes: the answer cannot depend on it
        status_line = s.makefile("rb").readline()
    assert status_line.split()[1] == b"413"


def test_a_chunked_body_is_read_through_the_server(web: WebProcess) -> None:
    body = webhooks.labeled()
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=30)
    conn.request("POST", "/webhook", body=iter([body[:1000], body[1000:]]),
                 headers=webhooks.headers("issues", body), encode_chunked=True)  # fmt: skip
    response = conn.getresponse()
    assert response.status == 202
    conn.close()


def test_with_redis_down_triggers_are_refused_and_health_says_so(
    web_without_redis: WebProcess,
) -> None:
    assert web_without_redis.deliver("issues", webhooks.labeled())[0] == 503
    assert web_without_redis.request("GET", "/healthz")[0] == 503
    assert (
        web_without_redis.deliver("ping", webhooks.example_bytes("ping", "payload.json"))[0] == 200
    )
    assert web_without_redis.request("POST", "/webhook", b"", {"X-GitHub-Event": "star"})[0] == 204


def _scrape(web: WebProcess) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        assert response.status == 200
        return response.read().decode()
    finally:
        conn.close()


def test_metrics_add_up_across_the_servers_processes(web: WebProcess) -> None:
    # GET /webhook (405) is sent by no other test here, so its count is this test's alone.
    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(lambda _: web.request("GET", "/webhook")[0], range(20)))
    assert set(statuses) == {405}
    line = 'reqdrive_deliveries_total{answer="405"} 20.0'
    deadline = time.monotonic() + START_TIMEOUT_S
    # Each server process adds its counts to Redis within seconds; any scrape sees the total.
    while line not in (text := _scrape(web)):
        assert time.monotonic() < deadline, text
        time.sleep(0.5)
    assert 'reqdrive_queue_jobs{state="queued"}' in text


# Hostile clients (issue 7), against the server `reqdrive serve` runs


@pytest.fixture(scope="module")
def served(
    redis_session_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebProcess]:
    log = tmp_path_factory.mktemp("served") / "serve.log"
    server = WebProcess("serve", redis_session_url, log)
    yield server
    server.stop()


def _trickle(port: int, declared: int) -> socket.socket:
    """A client that sends a delivery's headers and a few bytes of its body, then waits."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(
        b"POST /webhook HTTP/1.1\r\nHost: localhost\r\nX-GitHub-Event: issues\r\n"
        b"X-GitHub-Delivery: slow\r\nContent-Length: %d\r\n\r\n{" % declared
    )
    return s


def test_slow_bodies_hold_no_thread_and_get_408_at_the_deadline(
    served: WebProcess, redis_conn: redis.Redis
) -> None:
    held = [_trickle(served.port, 1000) for _ in range(600)]
    try:
        # More slow clients than a thread-per-request server has threads: a real delivery and the
        # health check are still answered while they are held.
        assert served.request("GET", "/healthz") == (200, {"redis": "ok"})
        status, answer = served.deliver("issues", webhooks.labeled(number=11))
        assert status == 202
        assert queue(redis_conn).job_ids == answer["job_ids"]
        # A client still trickling when the deadline passes is answered and let go.
        held[0].settimeout(BODY_DEADLINE_S + 20)
        assert held[0].makefile("rb").readline().split()[1] == b"408"
    finally:
        for s in held:
            s.close()


def _memory(server: WebProcess) -> int:
    import psutil

    main = psutil.Process(server.process.pid)
    return sum(p.memory_info().rss for p in [main, *main.children(recursive=True)])


def test_unsigned_uploads_cannot_grow_the_process_past_its_budget(served: WebProcess) -> None:
    size, uploads = 20 * 1024 * 1024, 24  # 480 MiB in flight if nothing refused them
    body = b"x" * size
    headers = {"X-GitHub-Event": "issues", "X-GitHub-Delivery": "big",
               "X-Hub-Signature-256": "sha256=" + "0" * 64}  # fmt: skip
    before = _memory(served)
    peak = before

    def upload() -> int:
        try:
            return served.request("POST", "/webhook", body, headers)[0]
        except (BrokenPipeError, ConnectionResetError):
            return 503  # answered (503, before reading) and closed while the body was sent

    with ThreadPoolExecutor(max_workers=uploads) as pool:
        futures = [pool.submit(upload) for _ in range(uploads)]
        while not all(f.done() for f in futures):
            peak = max(peak, _memory(served))
            time.sleep(0.02)
        statuses = sorted(f.result() for f in futures)
    # Each of the server's processes holds at most its budget of unverified bodies (plus one
    # body being verified); without the budget every upload was held at once.
    bound = WORKERS * (UNVERIFIED_BUDGET_BYTES + 2 * size) + 64 * 1024 * 1024
    assert peak - before < bound < uploads * size
    assert set(statuses) <= {401, 503}  # never verified; refused beyond the budget
    assert 401 in statuses
