"""With the `api` network an agent reaches its model's API and nothing else: real executables
try every other way out from inside the App's sandbox."""

from __future__ import annotations

import json
import shlex
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from worker.agents.base import AgentCall, AgentOutcome, AgentSettings
from worker.agents.registry import make_runner
from worker.confine.egress import url_endpoint
from worker.confine.redact import Redactor
from worker.confine.sandbox import Sandbox, SandboxMode, SandboxNetwork, make_sandbox

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

# Everything an attacker tries, each result printed as one JSON line: {"try": ..., "got": ...}.
PROBE = r"""#!/usr/bin/python3
import json, os, socket, sys, urllib.request

api, other, redis_port = sys.argv[1], sys.argv[2], int(sys.argv[3])

def report(name, fn):
    try:
        got = fn()
    except Exception as error:
        got = f"{type(error).__name__}: {error}"
    print(json.dumps({"try": name, "got": str(got)}), flush=True)

def fetch(url):
    return urllib.request.urlopen(url, timeout=10).read().decode()

def direct(host, port):
    socket.create_connection((host, port), timeout=5).close()
    return "connected"

def connect_via(address, target):
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    with socket.socket(family) as sock:
        sock.settimeout(10)
        sock.connect(address)
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        return sock.recv(4096).decode().splitlines()[0]

proxy = ("127.0.0.1", int(os.environ["HTTPS_PROXY"].rsplit(":", 1)[1]))
host = urllib.parse.urlsplit(other)
report("api", lambda: fetch(api + "/v1/ping"))
report("other via proxy", lambda: fetch(other + "/loot"))
report("redis via proxy", lambda: connect_via(proxy, f"127.0.0.1:{redis_port}"))
report("github via proxy", lambda: connect_via(proxy, "api.github.com:443"))
report("metadata via proxy", lambda: connect_via(proxy, "169.254.169.254:80"))
report("other via socket", lambda: connect_via("/run/reqdrive/egress.sock", host.netloc))
report("redis direct", lambda: direct("127.0.0.1", redis_port))
report("other direct", lambda: direct(host.hostname, host.port))
report("metadata direct", lambda: direct("169.254.169.254", 80))
report("dns", lambda: socket.getaddrinfo("api.github.com", 443))
"""


@dataclass
class Recorder:
    """A local HTTP server that answers every GET and remembers the paths it was asked."""

    name: str
    paths: list[str] = field(default_factory=list)
    url: str = ""


@contextmanager
def http_server(name: str) -> Iterator[Recorder]:
    recorder = Recorder(name)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            recorder.paths.append(self.path)
            body = f"{name} answered {self.path}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    recorder.url = f"http://127.0.0.1:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def limited() -> Sandbox:
    sandbox = make_sandbox(SandboxMode.ON, network=SandboxNetwork.API)
    assert sandbox is not None
    return sandbox


def probe_call(
    tmp_path: Path, sandbox: Sandbox, script: str, args: list[str], api: str
) -> tuple[Path, AgentOutcome]:
    """Run script as the agent through the command runner (as REQDRIVE_AGENT_COMMAND would),
    with `api` as its model's API; the call's log and outcome."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "attacker").write_text(script)
    (bin_dir / "attacker").chmod(0o755)
    worktree, home, handoff = tmp_path / "worktree", tmp_path / "home", tmp_path / "handoff"
    for folder in (worktree, home, handoff):
        folder.mkdir()
    prompt = tmp_path / "prompt.md"
    prompt.write_text("attack")
    call = AgentCall(
        prompt_file=prompt,
        cwd=worktree,
        run_dir=handoff,
        home_dir=home,
        log_path=tmp_path / "agent.log",
        timeout_s=120,
        sandbox=sandbox.bind(writable=[home, handoff], readonly=[prompt]),
    )
    settings = AgentSettings(runner="command", command=shlex.join(["attacker", *args]))
    source_env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "ANTHROPIC_BASE_URL": api}
    runner = make_runner(settings, redactor=Redactor(), source_env=source_env)
    outcome = runner.run(call)
    return call.log_path, outcome


def results(log: Path) -> dict[str, str]:
    found = {}
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            found[entry["try"]] = entry["got"]
    return found


def test_an_agent_reaches_its_model_api_and_nothing_else(
    tmp_path: Path, limited: Sandbox, redis_url: str
) -> None:
    redis_port = urlsplit(redis_url).port or 6379
    with http_server("api") as api, http_server("other") as other:
        args = [api.url, other.url, str(redis_port)]
        log, outcome = probe_call(tmp_path, limited, PROBE, args, api.url)
    assert outcome.exit_code == 0, outcome.result_text

    got = results(log)
    assert got["api"] == "api answered /v1/ping"
    assert api.paths == ["/v1/ping"]
    assert other.paths == []  # not reached by any route
    assert "403" in got["other via proxy"]
    for route in ("redis", "github", "metadata"):
        assert got[f"{route} via proxy"] == "HTTP/1.1 403 Forbidden", route
    assert got["other via socket"] == "HTTP/1.1 403 Forbidden"
    # Inside, 127.0.0.1 is the sandbox's own loopback: the worker's services are not on it.
    assert "Connection refused" in got["redis direct"]
    assert "Connection refused" in got["other direct"]
    assert "unreachable" in got["metadata direct"]
    assert "resolution" in got["dns"] or "not known" in got["dns"]
    refusals = [line for line in log.read_text().splitlines() if "egress refused" in line]
    assert f"[reqdrive] egress refused: CONNECT 127.0.0.1:{redis_port}: not the model's API" in (
        "\n".join(refusals)
    )
    assert any("api.github.com:443" in line for line in refusals)
    assert len(refusals) == 5


def test_checks_get_no_network_at_all(tmp_path: Path) -> None:
    """A gate runs the agent's code: with the `api` network it reaches nothing, not even the
    model's API or REQDRIVE_SANDBOX_API_HOSTS (no runner allows them, so no proxy starts)."""
    from worker.confine.processes import run_process

    with http_server("api") as api:
        hosts = [url_endpoint(api.url)]
        limited = make_sandbox(SandboxMode.ON, network=SandboxNetwork.API, api_hosts=hosts)
        assert limited is not None
        script = tmp_path / "gate.py"
        script.write_text(
            "import os, urllib.request\n"
            "print('proxy', os.environ.get('HTTPS_PROXY'))\n"
            f"try: urllib.request.urlopen('{api.url}/gate', timeout=5)\n"
            "except OSError as e: print('refused', e)\n"
        )
        outcome = run_process(
            ["/usr/bin/python3", str(script)],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin"},
            timeout_s=60,
            log_path=tmp_path / "gate.log",
            redactor=Redactor(),
            sandbox=limited,
        )
    assert outcome.exit_code == 0
    assert "proxy None" in outcome.output_tail
    assert "refused" in outcome.output_tail and "Connection refused" in outcome.output_tail
    assert api.paths == []


def test_with_the_open_network_a_model_api_on_the_workers_loopback_is_reached_by_proxy(
    tmp_path: Path,
) -> None:
    """The default: the sandbox's own namespace; its model's API (a local model server on the
    worker's 127.0.0.1) is reached through the proxy, which allows it by name."""
    from worker.confine.processes import run_process

    sandbox = make_sandbox(SandboxMode.ON)
    assert sandbox is not None
    with http_server("api") as api:
        outcome = run_process(
            ["/usr/bin/python3", "-c", f"import urllib.request as u; u.urlopen('{api.url}/x')"],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin"},
            timeout_s=60,
            log_path=tmp_path / "open.log",
            redactor=Redactor(),
            sandbox=sandbox.allowing([api.url]),
        )
    assert outcome.exit_code == 0, outcome.output_tail
    assert api.paths == ["/x"]
    assert "--unshare-net" in sandbox.wrap(["true"], cwd=tmp_path, env={})[0]


@pytest.mark.parametrize(
    ("script", "timeout_s", "exit_code"),
    [("exit 3", 60, 3), ("trap '' TERM; sleep 60", 1, None), ("sleep 60", 1, None)],
)
def test_behind_the_relay_the_agents_exit_and_timeout_are_its_own(
    tmp_path: Path, limited: Sandbox, script: str, timeout_s: float, exit_code: int | None
) -> None:
    from worker.confine.processes import run_process

    outcome = run_process(
        ["/bin/sh", "-c", script],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        timeout_s=timeout_s,
        log_path=tmp_path / "agent.log",
        redactor=Redactor(),
        grace_s=1,
        sandbox=limited.allowing(["https://api.anthropic.com"]),
    )
    assert outcome.exit_code == exit_code
    assert outcome.timed_out is (exit_code is None)


# Other spellings of a refused target, and a second request hidden behind an allowed one.
EVASIONS = r"""
import json, os, socket, sys

api_port, other_port = sys.argv[1], sys.argv[2]
proxy = ("127.0.0.1", int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1]))

def send(raw):
    with socket.create_connection(proxy, timeout=10) as sock:
        sock.sendall(raw.encode())
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    return data.decode(errors="replace").splitlines()[0] if data else "closed"

tries = {
    f"CONNECT {target}:{other_port}": f"CONNECT {target}:{other_port} HTTP/1.1\r\n\r\n"
    for target in ("[::1]", "0x7f.1", "2130706433", "127.1", "localhost", "127.0.0.1.")
}
tries["userinfo"] = (
    f"GET http://127.0.0.1:{api_port}@127.0.0.1:{other_port}/x HTTP/1.1\r\nHost: a\r\n\r\n"
)
tries["fragment"] = (
    f"GET http://127.0.0.1:{other_port}#@127.0.0.1:{api_port}/ HTTP/1.1\r\nHost: a\r\n\r\n"
)
tries["pipelined"] = (
    f"GET http://127.0.0.1:{api_port}/first HTTP/1.1\r\nHost: a\r\n\r\n"
    f"GET http://127.0.0.1:{other_port}/smuggled HTTP/1.1\r\nHost: b\r\n\r\n"
)
tries["smuggled in a body"] = (
    f"POST http://127.0.0.1:{api_port}/second HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n"
    f"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    f"CONNECT 127.0.0.1:{other_port} HTTP/1.1\r\n\r\n"
)
for name, raw in tries.items():
    try:
        got = send(raw)
    except OSError as error:
        got = f"{type(error).__name__}: {error}"
    print(json.dumps({"try": name, "got": got}), flush=True)
"""


def test_no_spelling_or_smuggled_request_reaches_a_refused_host(
    tmp_path: Path, limited: Sandbox
) -> None:
    """IPv6, hex, decimal and short forms of loopback, a trailing dot, userinfo and fragment
    tricks in an absolute URL, a second request pipelined or hidden in a body: the refused
    server on the worker's loopback is never asked anything."""
    from worker.confine.processes import run_process

    script = tmp_path / "evasions.py"
    script.write_text(EVASIONS)
    with http_server("api") as api, http_server("other") as other:
        api_port, other_port = (urlsplit(s.url).port for s in (api, other))
        outcome = run_process(
            ["/usr/bin/python3", str(script), str(api_port), str(other_port)],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin"},
            timeout_s=60,
            log_path=tmp_path / "agent.log",
            redactor=Redactor(),
            sandbox=limited.allowing([api.url]).bind(readonly=[script]),
        )
    got = results(tmp_path / "agent.log")
    assert outcome.exit_code == 0, outcome.output_tail
    assert other.paths == []
    assert len(got) == 10
    for name, answer in got.items():
        if name.startswith("CONNECT") or name in ("userinfo", "fragment"):
            assert answer.startswith("HTTP/1.1 403"), (name, answer)
    # What followed an allowed request went to the allowed server, nowhere else.
    assert "/first" in api.paths


def test_a_refused_target_with_terminal_escapes_reaches_the_workers_text_log_escaped(
    tmp_path: Path, limited: Sandbox
) -> None:
    """The worker's log names each refused target; in a terminal (the text format) an escape
    sequence the agent put in the target would retitle it or write its clipboard (OSC 52)."""
    import io
    import logging

    from bot.ops.logs import TextFormatter
    from worker.confine.processes import run_process

    script = tmp_path / "escapes.py"
    script.write_text(
        "import os, socket\n"
        "port = int(os.environ['HTTP_PROXY'].rsplit(':', 1)[1])\n"
        "for target in ('\\x1b]52;c;b3duZWQ=\\x07:443', 'a\\x1b[2J\\x9b:443'):\n"
        "    with socket.create_connection(('127.0.0.1', port), timeout=10) as sock:\n"
        "        sock.sendall(f'CONNECT {target} HTTP/1.1\\r\\n\\r\\n'.encode('latin-1'))\n"
        "        print(sock.recv(4096).decode('latin-1').splitlines()[0], flush=True)\n"
    )
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(TextFormatter(Redactor()))
    logger = logging.getLogger("worker.confine.egress")
    logger.addHandler(handler)
    try:
        outcome = run_process(
            ["/usr/bin/python3", str(script)],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin"},
            timeout_s=60,
            log_path=tmp_path / "agent.log",
            redactor=Redactor(),
            sandbox=limited.allowing(["https://api.anthropic.com"]).bind(readonly=[script]),
        )
    finally:
        logger.removeHandler(handler)
    assert outcome.exit_code == 0, outcome.output_tail
    lines = [line for line in buffer.getvalue().splitlines() if "egress refused" in line]
    assert len(lines) == 2, buffer.getvalue()
    assert not [c for c in buffer.getvalue() if c in "\x1b\x07\x9b"]
    assert "\\u001b]52;c;b3duZWQ=\\u0007:443" in lines[0]
