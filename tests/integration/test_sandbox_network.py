"""With the default `open` network an agent reaches public hosts and its model's API, never the
worker's host: real executables try the worker's loopback, its own address and the metadata
service from inside the App's default sandbox."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest

from tests.integration.test_sandbox_egress import http_server, probe_call, results
from worker.confine.egress import MAX_CONNECTIONS
from worker.confine.processes import run_process
from worker.confine.redact import Redactor
from worker.confine.sandbox import (
    PROXY_SOCKET_INSIDE,
    RELAY_PORT,
    Sandbox,
    SandboxMode,
    SandboxNetwork,
    make_sandbox,
)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

# What a hostile agent tries, each result one JSON line. It sends nothing to an address that
# is not loopback unless it finds itself in a network namespace of its own (where nothing
# leaves: no route); the proxy must refuse those before connecting.
PROBE = r"""#!/usr/bin/python3
import ipaddress, json, os, socket, sys, urllib.request

api, trap_port, redis_port, host_address = sys.argv[1], *map(int, sys.argv[2:4]), sys.argv[4]

def report(name, fn):
    try:
        got = fn()
    except Exception as error:
        got = f"{type(error).__name__}: {error}"
    print(json.dumps({"try": name, "got": str(got)}), flush=True)

def listening(path):
    with open(path) as table:
        rows = [line.split() for line in list(table)[1:]]
    return [int(row[1].rsplit(":", 1)[1], 16) for row in rows if row[3] == "0A"]

def interfaces():
    with open("/proc/net/dev") as table:
        return " ".join(sorted(line.split(":")[0].strip() for line in list(table)[2:]))

own_namespace = interfaces() == "lo"

def direct(host, port):
    if not own_namespace and not ipaddress.ip_address(host).is_loopback:
        return "not tried: this is the host's network"
    socket.create_connection((host, port), timeout=5).close()
    return "connected"

def via_proxy(target):
    proxy = ("127.0.0.1", int(os.environ["HTTPS_PROXY"].rsplit(":", 1)[1]))
    with socket.create_connection(proxy, timeout=10) as sock:
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    return answer.decode(errors="replace").replace("\r\n", " | ")

report("interfaces", interfaces)
def fetch(url):
    return urllib.request.urlopen(url, timeout=10).read().decode()

ports = lambda: listening("/proc/net/tcp") + listening("/proc/net/tcp6")
report("listening", lambda: " ".join(map(str, ports())))
report("model api", lambda: fetch(api + "/v1/ping"))
report("plain http to the host's loopback", lambda: fetch(f"http://127.0.0.1:{trap_port}/loot"))
targets = {
    "redis 127.0.0.1": ("127.0.0.1", redis_port),
    "redis ::1": ("::1", redis_port),
    "trap 127.0.0.1": ("127.0.0.1", trap_port),
    "trap ::1": ("::1", trap_port),
    "metadata": ("169.254.169.254", 80),
}
if host_address:
    targets["host address"] = (host_address, trap_port)
for name, (host, port) in targets.items():
    report(f"direct {name}", lambda: direct(host, port))
spellings = [
    f"127.0.0.1:{redis_port}", f"[::1]:{redis_port}", f"localhost:{redis_port}",
    f"127.0.0.1:{trap_port}", f"[::1]:{trap_port}", f"localhost.:{trap_port}",
    f"0x7f.1:{trap_port}", f"2130706433:{trap_port}", f"127.1:{trap_port}",
    f"0177.0.0.1:{trap_port}", f"127.0.0.1.:{trap_port}", f"0:{trap_port}", f"[::]:{trap_port}",
    f"[::ffff:127.0.0.1]:{trap_port}", f"[::ffff:7f00:1]:{trap_port}",
    f"[64:ff9b::7f00:1]:{trap_port}", f"[2002:7f00:1::]:{trap_port}",
    "169.254.169.254:80", "[fd00:ec2::254]:80", "[fe80::1]:80", "10.0.0.1:80",
    "172.16.0.1:80", "192.168.1.1:80", "100.64.0.1:80", "224.0.0.1:80", "[ff02::1]:80",
]
if host_address:
    spellings.append(f"{host_address}:{trap_port}")
for target in spellings:
    report(f"via proxy {target}", lambda: via_proxy(target))
"""


@contextmanager
def loopback_trap() -> Iterator[tuple[int, list[str]]]:
    """A server on the worker's loopback (127.0.0.1 and ::1, one port) that records every
    connection it accepts: the agent must never reach it."""
    accepted: list[str] = []
    first = socket.create_server(("127.0.0.1", 0))
    port = first.getsockname()[1]
    listeners = [first, socket.create_server(("::1", port), family=socket.AF_INET6)]

    def serve(listener: socket.socket) -> None:
        while True:
            try:
                conn, address = listener.accept()
            except OSError:
                return
            accepted.append(str(address))
            conn.close()

    threads = [threading.Thread(target=serve, args=(s,), daemon=True) for s in listeners]
    for thread in threads:
        thread.start()
    try:
        yield port, accepted
    finally:
        for listener in listeners:
            listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for thread in threads:
            thread.join(5)


def host_listening(port: int) -> bool:
    """Whether the worker's own /proc/net/tcp shows a listener on this port."""
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return any(int(row[1].rsplit(":", 1)[1], 16) == port and row[3] == "0A" for row in rows)


def host_address() -> str:
    """A non-loopback IPv4 address of this host's own, "" if it has none."""
    for addresses in psutil.net_if_addrs().values():
        for item in addresses:
            if item.family == socket.AF_INET and not item.address.startswith("127."):
                return item.address
    return ""


@pytest.fixture
def app_sandbox() -> Sandbox:
    """The sandbox `reqdrive worker` makes with no network setting: the default, `open`."""
    sandbox = make_sandbox(SandboxMode.ON)
    assert sandbox is not None
    return sandbox


def test_the_agent_sees_and_reaches_nothing_of_the_workers_host_but_its_model_api(
    tmp_path: Path, app_sandbox: Sandbox, redis_base_url: str
) -> None:
    redis = urlsplit(redis_base_url)
    redis_port = redis.port or 6379 if redis.scheme == "redis" else 6379
    address = host_address()
    with loopback_trap() as (trap_port, accepted), http_server("api") as api:
        assert host_listening(trap_port)  # the worker's own table shows it
        args = [api.url, str(trap_port), str(redis_port), address]
        log, outcome = probe_call(tmp_path, app_sandbox, PROBE, args, api.url)
    got = results(log)
    assert outcome.exit_code == 0, outcome.result_text

    # /proc/net is the sandbox's own: only its loopback, only the relay listening on it.
    assert got["interfaces"] == "lo"
    listening = got["listening"].split()
    assert str(RELAY_PORT) in listening
    assert str(trap_port) not in listening and str(redis_port) not in listening
    # Directly: 127.0.0.1 and ::1 are the sandbox's own; nothing else has a route.
    for name in ("redis 127.0.0.1", "redis ::1", "trap 127.0.0.1", "trap ::1"):
        assert "Connection refused" in got[f"direct {name}"], name
    assert "unreachable" in got["direct metadata"]
    if address:
        assert "unreachable" in got["direct host address"]
    # Through the proxy: refused, saying why, before any connection is made.
    proxied = {k.removeprefix("via proxy "): v for k, v in got.items() if "via proxy" in k}
    assert len(proxied) == 26 + bool(address)
    for target, answer in proxied.items():
        assert answer.startswith("HTTP/1.1 403 Forbidden"), (target, answer)
        assert "not a public address" in answer, (target, answer)
    assert "(loopback)" in proxied[f"0x7f.1:{trap_port}"]
    assert "::ffff:7f00:1 (wraps 127.0.0.1, loopback)" in proxied[f"[::ffff:7f00:1]:{trap_port}"]
    assert "(cloud metadata)" in proxied["169.254.169.254:80"]
    assert "(cloud metadata)" in proxied["[fd00:ec2::254]:80"]
    if address:
        assert "an address of the worker's host" in proxied[f"{address}:{trap_port}"]
    assert "403" in got["plain http to the host's loopback"]
    # The model's API (on the worker's loopback here, as a local model server would be) is
    # the one endpoint the proxy connects to by name; the trap was never reached.
    assert got["model api"] == "api answered /v1/ping"
    assert api.paths == ["/v1/ping"]
    assert accepted == []


def test_a_check_reaches_its_own_loopback_not_the_workers(
    tmp_path: Path, app_sandbox: Sandbox
) -> None:
    """A gate's tests may start a server on 127.0.0.1 and use it; the worker's stays out of
    reach, and the proxy is there for public downloads."""
    script = tmp_path / "gate.py"
    script.write_text(
        "import http.server, os, sys, threading, urllib.request\n"
        "server = http.server.HTTPServer(('127.0.0.1', 0), http.server.SimpleHTTPRequestHandler)\n"
        "threading.Thread(target=server.serve_forever, daemon=True).start()\n"
        "own = f'http://127.0.0.1:{server.server_port}/'\n"
        "print('own', urllib.request.urlopen(own, timeout=10).status)\n"
        "print('proxy', os.environ.get('HTTPS_PROXY'))\n"
        "try: urllib.request.urlopen(f'http://127.0.0.1:{sys.argv[1]}/', timeout=10)\n"
        "except OSError as e: print('host', e)\n"
    )
    with loopback_trap() as (trap_port, accepted):
        outcome = run_process(
            ["/usr/bin/python3", str(script), str(trap_port)],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin"},
            timeout_s=60,
            log_path=tmp_path / "gate.log",
            redactor=Redactor(),
            sandbox=app_sandbox,
        )
    assert outcome.exit_code == 0, outcome.output_tail
    assert "own 200" in outcome.output_tail
    assert f"proxy http://127.0.0.1:{RELAY_PORT}" in outcome.output_tail
    assert "host <urlopen error [Errno 111] Connection refused>" in outcome.output_tail
    assert accepted == []


# Opens many connections to the proxy's socket, as the attacker did, and holds them,
# sending nothing; then reads what each got: a 503 (turned away at once) or nothing yet (a
# slot, waiting for a request head).
BURST = r"""#!/usr/bin/python3
import socket, sys, time

held = []
for _ in range(int(sys.argv[2])):
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(sys.argv[1])
    held.append(sock)
time.sleep(float(sys.argv[3]))
turned_away = 0
for sock in held:
    sock.setblocking(False)
    try:
        turned_away += sock.recv(4096).startswith(b"HTTP/1.1 503")
    except BlockingIOError:
        pass
print("turned away", turned_away, flush=True)
"""
BURST_CONNECTIONS = 900  # under the 1,024 descriptors a process may hold by default


@pytest.mark.parametrize("network", [SandboxNetwork.OPEN, SandboxNetwork.API])
def test_a_burst_of_idle_connections_makes_no_thread_past_the_proxys_slots(
    tmp_path: Path, network: SandboxNetwork
) -> None:
    sandbox = make_sandbox(SandboxMode.ON, network=network)
    assert sandbox is not None
    worker = psutil.Process()
    before = worker.num_threads()
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak.append(worker.num_threads())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    with ExitStack() as stack:
        api = stack.enter_context(http_server("api"))
        sampler.start()
        stack.callback(sampler.join)
        stack.callback(done.set)
        args = [str(PROXY_SOCKET_INSIDE), str(BURST_CONNECTIONS), "3"]
        log, outcome = probe_call(tmp_path, sandbox, BURST, args, api.url)
    assert outcome.exit_code == 0, outcome.result_text
    # A tunnel is two threads; the rest are the proxy's accepting thread and the call's own.
    assert max(peak) - before <= 2 * MAX_CONNECTIONS + 8, max(peak) - before
    assert f"turned away {BURST_CONNECTIONS - MAX_CONNECTIONS}" in log.read_text()
    refusals = [line for line in log.read_text().splitlines() if "connections at once" in line]
    assert len(refusals) == BURST_CONNECTIONS - MAX_CONNECTIONS


REGISTRY_PROBE = r"""#!/usr/bin/python3
import json, os, socket, sys

proxy = ("127.0.0.1", int(os.environ["HTTPS_PROXY"].rsplit(":", 1)[1]))
for target in sys.argv[1:]:
    with socket.create_connection(proxy, timeout=10) as sock:
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
        answer = sock.recv(4096).decode().splitlines()[0]
    print(json.dumps({"try": target, "got": answer}), flush=True)
"""


def test_the_registries_network_reaches_the_model_api_and_registries_only(
    tmp_path: Path,
) -> None:
    """A public host not on the list is refused without being resolved or connected to."""
    sandbox = make_sandbox(SandboxMode.ON, network=SandboxNetwork.REGISTRIES)
    assert sandbox is not None
    with http_server("api") as api:
        api_target = api.url.removeprefix("http://")
        args = ["example.com:443", "pypi.org:80", "127.0.0.1:6379", api_target]
        log, outcome = probe_call(tmp_path, sandbox, REGISTRY_PROBE, args, api.url)
    got = results(log)
    assert outcome.exit_code == 0, outcome.result_text
    for target in args[:3]:
        assert got[target] == "HTTP/1.1 403 Forbidden", target
    assert got[api_target] == "HTTP/1.1 200 Connection established"
    refusal = next(line for line in log.read_text().splitlines() if "example.com:443" in line)
    assert "pypi.org:443" in refusal and "registry.npmjs.org:443" in refusal
