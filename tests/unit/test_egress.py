"""The egress proxy lets a call reach the allowed endpoints only, and says what it refused."""

from __future__ import annotations

import contextlib
import shutil
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from worker.agents.base import AgentSettings, ProcessRunner
from worker.agents.registry import make_runner
from worker.confine.egress import EgressProxy, egress_proxy, endpoint, url_endpoint
from worker.confine.redact import Redactor
from worker.confine.sandbox import (
    PROXY_SOCKET_INSIDE,
    RELAY_INSIDE,
    RELAY_PORT,
    Sandbox,
    SandboxNetwork,
    api_hosts,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("api.anthropic.com:443", ("api.anthropic.com", 443)),
        ("API.Anthropic.com.:443", ("api.anthropic.com", 443)),
        ("[::1]:8080", ("::1", 8080)),
        ("127.0.0.1:6379", ("127.0.0.1", 6379)),
    ],
)
def test_endpoints_are_host_and_port(text: str, expected: tuple[str, int]) -> None:
    assert endpoint(text) == expected


@pytest.mark.parametrize("text", ["api.anthropic.com", "host:http", "http://h:1", "h:1/x", ":443"])
def test_anything_else_is_not_an_endpoint(text: str) -> None:
    with pytest.raises(ValueError, match="not a host:port"):
        endpoint(text)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://api.anthropic.com", ("api.anthropic.com", 443)),
        ("https://api.openai.com/v1", ("api.openai.com", 443)),
        ("http://127.0.0.1:8123/", ("127.0.0.1", 8123)),
        ("http://localhost", ("localhost", 80)),
    ],
)
def test_a_base_urls_endpoint(url: str, expected: tuple[str, int]) -> None:
    assert url_endpoint(url) == expected


def test_the_api_hosts_setting_lists_endpoints() -> None:
    assert api_hosts("a.example:443, b.example:8443  c.example:1") == [
        ("a.example", 443),
        ("b.example", 8443),
        ("c.example", 1),
    ]
    assert api_hosts("") == []


@pytest.mark.parametrize(
    ("runner", "env", "expected"),
    [
        ("claude", {}, [("api.anthropic.com", 443)]),
        ("claude", {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9000"}, [("127.0.0.1", 9000)]),
        ("codex", {}, [("api.openai.com", 443)]),
        ("command", {}, []),
        ("command", {"OPENAI_BASE_URL": "https://llm.internal:8443/v1"}, [("llm.internal", 8443)]),
    ],
)
def test_each_runner_names_its_models_api(
    runner: str, env: dict[str, str], expected: list[tuple[str, int]]
) -> None:
    settings = AgentSettings(runner=runner, command="agent" if runner == "command" else None)
    made = make_runner(settings, redactor=Redactor(), source_env=env)
    assert isinstance(made, ProcessRunner)  # every registered runner is one
    assert Sandbox().allowing(made.api_urls(env)).api_hosts == tuple(expected)


def test_a_limited_sandbox_starts_the_agent_behind_the_relay(tmp_path: Path) -> None:
    sandbox = Sandbox(network=SandboxNetwork.API, proxy_socket=tmp_path / "egress.sock")
    argv, _ = sandbox.wrap(["claude", "-p"], cwd=tmp_path, env={"PATH": "/usr/bin"})
    command = argv[argv.index("--", argv.index("--chdir")) + 1 :]
    after = {argv[i]: argv[i + 1 : i + 3] for i in range(len(argv) - 2)}
    assert "--unshare-net" in argv
    assert command[2:4] == ["-S", str(RELAY_INSIDE)]
    assert command[-3:] == ["--", "claude", "-p"]
    assert after[str(tmp_path / "egress.sock")][0] == str(PROXY_SOCKET_INSIDE)
    assert after["HTTPS_PROXY"][0] == f"http://127.0.0.1:{RELAY_PORT}"


@pytest.mark.parametrize("network", list(SandboxNetwork))
def test_no_network_setting_shares_the_hosts(tmp_path: Path, network: SandboxNetwork) -> None:
    sandbox = Sandbox(network=network).allowing(["https://api.anthropic.com"])
    argv, _ = sandbox.wrap(["claude"], cwd=tmp_path, env={})
    assert "--unshare-net" in argv


def test_inside_loopback_is_the_sandboxs_own_unless_the_model_api_is_on_the_workers(
    tmp_path: Path,
) -> None:
    """A server the tests start on 127.0.0.1 is reached directly (NO_PROXY); a local model
    server on the worker's loopback only through the proxy (no NO_PROXY)."""
    socket_path = tmp_path / "egress.sock"
    env = {"NO_PROXY": "internal.example"}
    public_api = Sandbox(proxy_socket=socket_path).allowing(["https://api.anthropic.com"])
    local_api = Sandbox(proxy_socket=socket_path).allowing(["http://127.0.0.1:8080"])
    argv, _ = public_api.wrap(["claude"], cwd=tmp_path, env=env)
    after = {argv[i]: argv[i + 1] for i in range(len(argv) - 1)}
    assert after["NO_PROXY"] == after["no_proxy"] == "localhost,127.0.0.1,::1"
    argv, _ = local_api.wrap(["claude"], cwd=tmp_path, env=env)
    assert "NO_PROXY" not in argv and "no_proxy" not in argv and "HTTPS_PROXY" in argv


@contextmanager
def echo_server() -> Iterator[int]:
    """A TCP server that sends back what it receives, then closes when the client does; each
    connection served at once (tunnels' upstream connections arrive in any order)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


@contextmanager
def running_proxy(*allowed: tuple[str, int]) -> Iterator[tuple[EgressProxy, list[str]]]:
    lines: list[str] = []
    with egress_proxy(allowed, lines.append) as proxy:
        yield proxy, lines


def ask(proxy: EgressProxy, request: bytes) -> socket.socket:
    client = socket.socket(socket.AF_UNIX)
    client.settimeout(10)
    client.connect(str(proxy.socket_path))
    client.sendall(request)
    return client


def ask_past_the_limit(proxy: EgressProxy, request: bytes) -> socket.socket:
    """Like ask(), for a connection the proxy turns away: it may answer and close before the
    request is even sent (its 503 is then read all the same)."""
    client = socket.socket(socket.AF_UNIX)
    client.settimeout(10)
    client.connect(str(proxy.socket_path))
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        client.sendall(request)
    return client


def read_all(client: socket.socket, *, reset_ends: bool = False) -> bytes:
    """Everything the proxy sent until it closed. `reset_ends`: a close that resets also ends
    it (a Unix socket closed with bytes it never read resets; what it sent before stays)."""
    chunks = []
    try:
        while chunk := client.recv(4096):
            chunks.append(chunk)
    except ConnectionResetError:
        if not reset_ends:
            raise
    finally:
        client.close()
    return b"".join(chunks)


def test_connect_to_an_allowed_endpoint_is_a_tunnel() -> None:
    with echo_server() as port, running_proxy(("127.0.0.1", port)) as (proxy, lines):
        # The first bytes of the tunnel travel with the request head, as a TLS client sends.
        client = ask(proxy, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nhello".encode())
        client.shutdown(socket.SHUT_WR)
        answer = read_all(client)
    assert answer.startswith(b"HTTP/1.1 200 Connection established\r\n")
    assert answer.endswith(b"\r\n\r\nhello")
    assert lines == []


def test_connect_anywhere_else_is_refused_and_said() -> None:
    with echo_server() as port, running_proxy(("api.anthropic.com", 443)) as (proxy, lines):
        answer = read_all(ask(proxy, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode()))
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    expected = (
        f"[reqdrive] egress refused: CONNECT 127.0.0.1:{port}: not the model's API or another "
        "allowed endpoint (allowed: api.anthropic.com:443)"
    )
    assert lines == [expected]
    assert expected.encode() in answer


def test_a_plain_http_request_is_sent_on_in_origin_form_and_closed() -> None:
    received: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while not data.endswith(b"body!"):
                data += conn.recv(4096)
            received.append(data)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with running_proxy(("127.0.0.1", port)) as (proxy, lines):
        request = (
            f"POST http://127.0.0.1:{port}/v1/messages?beta=true HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{port}\r\nProxy-Connection: Keep-Alive\r\n"
            "Content-Length: 5\r\n\r\nbody!"
        )
        answer = read_all(ask(proxy, request.encode()))
    thread.join(5)
    listener.close()
    head = received[0].decode()
    assert head.startswith("POST /v1/messages?beta=true HTTP/1.1\r\n")
    assert "Proxy-Connection" not in head and "Connection: close\r\n" in head
    assert head.endswith("\r\n\r\nbody!")
    assert answer.endswith(b"\r\n\r\nok")
    assert lines == []


@pytest.mark.parametrize(
    ("request_line", "status"),
    [
        ("GET http://169.254.169.254/latest/meta-data/ HTTP/1.1", b"403"),
        ("GET /relative HTTP/1.1", b"400"),
        ("GET https://api.anthropic.com/ HTTP/1.1", b"400"),
        ("CONNECT api.anthropic.com HTTP/1.1", b"400"),
    ],
)
def test_other_requests_are_refused(request_line: str, status: bytes) -> None:
    with running_proxy(("api.anthropic.com", 443)) as (proxy, lines):
        answer = read_all(ask(proxy, f"{request_line}\r\nHost: x\r\n\r\n".encode()))
    assert answer.startswith(b"HTTP/1.1 " + status)
    assert len(lines) == 1 and lines[0].startswith("[reqdrive] egress refused: ")


def test_closing_the_proxy_ends_open_tunnels_and_removes_its_socket() -> None:
    with echo_server() as port:
        proxy = EgressProxy([("127.0.0.1", port)], lambda line: None)
        proxy.start()
        client = ask(proxy, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
        assert client.recv(4096).startswith(b"HTTP/1.1 200")
        proxy.close()
        assert client.recv(4096) == b""  # the tunnel was shut, not left to the agent
        client.close()
    assert not proxy.socket_path.exists()


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"REQDRIVE_SANDBOX_NETWORK": "closed"}, "must be open, registries or api, not 'closed'"),
        ({"REQDRIVE_SANDBOX_API_HOSTS": "llm.internal"}, "not a host:port: 'llm.internal'"),
    ],
)
def test_reqdrive_run_refuses_a_bad_network_setting(env: dict[str, str], said: str) -> None:
    from worker.exceptions import PreflightError
    from worker.local.spec_from_args import sandbox_from

    with pytest.raises(PreflightError, match=said):
        sandbox_from("on", "--sandbox on", env)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
def test_reqdrive_run_reads_the_network_settings() -> None:
    from worker.local.spec_from_args import sandbox_from

    env = {"REQDRIVE_SANDBOX_NETWORK": "API", "REQDRIVE_SANDBOX_API_HOSTS": "llm.internal:8443"}
    sandbox = sandbox_from("on", "--sandbox on", env)
    assert sandbox is not None
    assert sandbox.network is SandboxNetwork.API
    assert sandbox.api_hosts == ()  # a check's sandbox: no way out
    allowed = sandbox.allowing(["https://api.anthropic.com"]).api_hosts
    assert allowed == (("api.anthropic.com", 443), ("llm.internal", 8443))


def test_connections_past_the_limit_are_refused_and_the_tunnels_go_on() -> None:
    lines: list[str] = []
    request = b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n"
    with echo_server() as port:
        proxy = EgressProxy([("127.0.0.1", port)], lines.append, max_connections=2)
        proxy.start()
        tunnels = [ask(proxy, request % port), ask(proxy, request % port)]
        try:
            for tunnel in tunnels:
                assert tunnel.recv(4096).startswith(b"HTTP/1.1 200")
            third = read_all(ask_past_the_limit(proxy, request % port), reset_ends=True)
            tunnels[0].sendall(b"still here")
            assert tunnels[0].recv(4096) == b"still here"
        finally:
            for tunnel in tunnels:
                tunnel.close()
            proxy.close()
    assert third.startswith(b"HTTP/1.1 503")
    # Turned away before its request is read: the line cannot name the target.
    assert lines == ["[reqdrive] egress refused: a connection: more than 2 connections at once"]


def test_a_client_that_sends_no_request_is_dropped_and_frees_its_slot() -> None:
    with echo_server() as port:
        proxy = EgressProxy([("127.0.0.1", port)], lambda line: None, max_connections=1,
                            head_timeout_s=0.2)  # fmt: skip
        proxy.start()
        try:
            silent = ask(proxy, b"")
            assert silent.recv(4096) == b""  # closed by the proxy, not by this test
            silent.close()
            tunnel = ask(proxy, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
            assert tunnel.recv(4096).startswith(b"HTTP/1.1 200")
            tunnel.close()
        finally:
            proxy.close()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
def test_a_worker_says_what_its_sandboxes_reach_at_start(caplog: pytest.LogCaptureFixture) -> None:
    from worker.confine.sandbox import SandboxMode, make_sandbox

    caplog.set_level("INFO", logger="worker.confine.sandbox")
    make_sandbox(SandboxMode.ON, network=SandboxNetwork.API, api_hosts=[("llm.internal", 1)])
    [record] = [r for r in caplog.records if r.getMessage() == "sandbox network"]
    # The log call's `extra` fields become attributes LogRecord's type does not declare.
    assert record.more_api_hosts == ["llm.internal:1"]  # type: ignore[attr-defined]
    assert record.reaches == "agent calls: the model's API only; checks: nothing"  # type: ignore[attr-defined]
