"""The real Claude Code CLI in the App's sandbox, and a repository's .claude/ settings ignored."""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.e2e.test_claude_runner import (
    FAKE_API_KEY,
    GITHUB_TOKEN,
    GREET_SOURCE,
    agent_env,  # noqa: F401 - fixtures used by name
    claude_bin,  # noqa: F401
    git,
    story_call,
    story_repo,  # noqa: F401
)
from tests.support.fake_anthropic import (
    ToolCall,
    Turn,
    fake_anthropic,
    say,
    tool_result_text,
    use,
)
from worker.agents.base import AgentOutcome, AgentSettings
from worker.agents.registry import make_runner
from worker.confine.processes import run_process
from worker.confine.redact import Redactor
from worker.confine.sandbox import SandboxMode, SandboxNetwork, make_sandbox, tool_paths

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def plant_settings(repo: Path, marker: Path) -> None:
    """A repository's own Claude settings: a wider allowlist and hooks that run a command."""
    hook = {"hooks": [{"type": "command", "command": f"touch {marker}"}]}
    settings = {
        "permissions": {"allow": ["Bash(chmod *)", "Bash(touch *)"]},
        "hooks": {"SessionStart": [hook], "PreToolUse": [{"matcher": "*", **hook}]},
    }
    (repo / ".claude").mkdir()
    for name in ("settings.json", "settings.local.json"):
        (repo / ".claude" / name).write_text(json.dumps(settings))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "claude settings")


def test_a_repositorys_claude_settings_neither_widen_the_allowlist_nor_run_hooks(
    agent_env: pytest.MonkeyPatch,  # noqa: F811
    story_repo: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    marker = tmp_path / "hook-ran"
    plant_settings(story_repo, marker)
    script = [use(ToolCall("Bash", {"command": "chmod 700 tests/test_greet.py"})), say("done")]
    with fake_anthropic(script) as server:
        agent_env.setenv("ANTHROPIC_BASE_URL", server.url)
        call = story_call(tmp_path, story_repo)
        outcome = make_runner(
            AgentSettings(runner="claude"), redactor=Redactor(), source_env=os.environ
        ).run(call)

    assert outcome.error is not None and "Bash chmod 700 tests/test_greet.py" in outcome.error
    assert not marker.exists()


def run_probe(
    tmp_path: Path,
    repo: Path,
    env: pytest.MonkeyPatch,
    script: list[Turn],
    network: SandboxNetwork,
) -> tuple[AgentOutcome, str, Path]:
    """One story call of the real CLI in the App's sandbox: its outcome, what the probe's Bash
    call read, and the call's log."""
    sandbox = make_sandbox(SandboxMode.ON, network=network)
    assert sandbox is not None
    with fake_anthropic(script) as server:
        env.setenv("ANTHROPIC_BASE_URL", server.url)
        call = story_call(tmp_path, repo)
        call.home_dir.mkdir(parents=True, exist_ok=True)
        confined = sandbox.bind(writable=[call.home_dir, call.run_dir], readonly=[call.prompt_file])
        call = replace(call, sandbox=confined)
        outcome = make_runner(
            AgentSettings(runner="claude"), redactor=Redactor(), source_env=os.environ
        ).run(call)
        probed = tool_result_text(server.message_requests()[3].tool_results()[0])
        return outcome, probed, call.log_path


def test_the_cli_works_in_the_apps_sandbox_and_sees_nothing_of_the_worker(
    agent_env: pytest.MonkeyPatch,  # noqa: F811
    story_repo: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    secret_file = tmp_path / "app-key.pem"
    secret_file.write_text("-----BEGIN RSA PRIVATE KEY-----\nworker-key\n")
    probe = (
        "import os\n"
        f"for p in ('/proc/1/environ', '{secret_file}'):\n"
        "    try: print(open(p, 'rb').read())\n"
        "    except OSError as e: print(e)\n"
        f"print(os.path.exists('{tmp_path / 'app-key.pem'}'), os.listdir('/proc'))\n"
    )
    script = [
        use(
            ToolCall("Write", {"file_path": str(story_repo / "greet.py"), "content": GREET_SOURCE})
        ),
        use(ToolCall("Write", {"file_path": str(story_repo / "probe.py"), "content": probe})),
        use(ToolCall("Bash", {"command": "python3 probe.py"})),
        say("Implemented greet()."),
    ]
    outcome, probed, _ = run_probe(tmp_path, story_repo, agent_env, script, SandboxNetwork.OPEN)

    assert outcome.ok, outcome.error
    assert (story_repo / "greet.py").read_text() == GREET_SOURCE
    assert "worker-key" not in probed and GITHUB_TOKEN not in probed
    assert "No such file" in probed and "False" in probed
    assert FAKE_API_KEY not in probed  # PID 1 is bwrap's, with no environment of ours


def test_the_cli_reaches_its_api_and_nothing_else_with_egress_limited(
    agent_env: pytest.MonkeyPatch,  # noqa: F811
    story_repo: Path,  # noqa: F811
    tmp_path: Path,
    redis_url: str,
) -> None:
    """REQDRIVE_SANDBOX_NETWORK=api: the real CLI works through the egress proxy; what its
    Bash tool tries elsewhere (the worker's Redis, through the proxy or directly) is refused."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    redis_port = urlsplit(redis_url).port or 6379
    probe = (
        "import os, socket, urllib.request\n"
        "print('proxy', os.environ.get('HTTPS_PROXY'))\n"
        f"try: urllib.request.urlopen('http://127.0.0.1:{redis_port}/', timeout=5)\n"
        "except OSError as e: print('via proxy:', e)\n"
        f"try: socket.create_connection(('127.0.0.1', {redis_port}), timeout=5)\n"
        "except OSError as e: print('direct:', e)\n"
    )
    script = [
        use(
            ToolCall("Write", {"file_path": str(story_repo / "greet.py"), "content": GREET_SOURCE})
        ),
        use(ToolCall("Write", {"file_path": str(story_repo / "probe.py"), "content": probe})),
        use(ToolCall("Bash", {"command": "python3 probe.py"})),
        say("Implemented greet()."),
    ]
    outcome, probed, log_path = run_probe(
        tmp_path, story_repo, agent_env, script, SandboxNetwork.API
    )

    assert outcome.ok, outcome.error
    assert (story_repo / "greet.py").read_text() == GREET_SOURCE
    assert "proxy http://127.0.0.1:" in probed
    assert "via proxy: HTTP Error 403" in probed
    assert "direct: [Errno 111] Connection refused" in probed
    log = log_path.read_text()
    assert f"[reqdrive] egress refused: GET 127.0.0.1:{redis_port}: not the model's API" in log


@pytest.fixture
def localhost_tls(tmp_path: Path) -> tuple[ssl.SSLContext, Path]:
    """A self-signed certificate for localhost (made with openssl) and a server context."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    cert, key = tmp_path / "tls" / "cert.pem", tmp_path / "tls" / "key.pem"
    cert.parent.mkdir()
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context, cert


def test_the_cli_reaches_an_https_api_through_the_proxys_connect_tunnel(
    claude_bin: Path,  # noqa: F811
    localhost_tls: tuple[ssl.SSLContext, Path],
    tmp_path: Path,
) -> None:
    """The production path: an https:// base URL, so the CLI asks the proxy to CONNECT and
    runs TLS end to end with the API (the proxy answers absolute https:// requests 400).
    run_process directly: the runner passes no CA variable, and this certificate is our own."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    context, cert = localhost_tls
    sandbox = make_sandbox(SandboxMode.ON, network=SandboxNetwork.API)
    assert sandbox is not None
    home = tmp_path / "home"
    home.mkdir()
    claude = str(claude_bin.resolve())
    with fake_anthropic([say("hello over TLS")], tls=context) as server:
        assert server.url.startswith("https://localhost:")
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(home),
            "ANTHROPIC_API_KEY": FAKE_API_KEY,
            "ANTHROPIC_BASE_URL": server.url,
            "NODE_EXTRA_CA_CERTS": str(cert),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        confined = sandbox.bind(writable=[home], readonly=[cert, *tool_paths(claude, "")]).allowing(
            [server.url]
        )
        outcome = run_process(
            [claude, "-p", "say hello", "--max-turns", "1"],
            cwd=tmp_path,
            env=env,
            timeout_s=120,
            log_path=tmp_path / "claude.log",
            redactor=Redactor(),
            sandbox=confined,
        )
        asked = [r.path for r in server.message_requests()]

    assert outcome.exit_code == 0, outcome.output_tail
    assert "hello over TLS" in outcome.output_tail
    assert asked == ["/v1/messages?beta=true"]
