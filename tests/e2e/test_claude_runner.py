"""The claude runner drives the real Claude Code CLI against a scripted Messages API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.claude_cli import install_claude_cli
from tests.support.fake_anthropic import (
    FakeAnthropic,
    ToolCall,
    Turn,
    Usage,
    fail,
    fake_anthropic,
    say,
    stall,
    tool_result_text,
    use,
)
from tests.support.processes import running
from worker.agents.base import AgentCall, AgentOutcome, AgentSettings
from worker.agents.claude import REVIEW_TOOLS, ClaudeRunner
from worker.agents.registry import make_runner
from worker.confine.redact import Redactor
from worker.exceptions import AgentError
from worker.git.runner import COMMITTER_EMAIL, COMMITTER_NAME

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MODEL = "claude-sonnet-4-5"
# Not shaped like an Anthropic key, so only the runner's exact-value redaction can hide it.
FAKE_API_KEY = "fake-anthropic-key-3f9c2d71b8e4"
GITHUB_TOKEN = "ghs_" + "A1b2C3d4E5f6G7h8I9j0" * 2
REDIS_URL = "redis://:worker-redis-password@127.0.0.1:6379/0"
PROMPT = "Implement US-001: greet(name) returns 'Hello, <name>!'. Commit when done."
COMMIT_MESSAGE = "feat: [US-001] - Greet by name"
# What the CLI sends in every request's tool list whatever --tools says: a stand-in for the
# tools it loads on demand (MCP's, none here: --strict-mcp-config), not a tool of its own.
CLI_OWN = {"DeferredToolPlaceholder"}
GREET_SOURCE = 'def greet(name: str) -> str:\n    return f"Hello, {name}!"\n'


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    return install_claude_cli()


@pytest.fixture
def agent_env(claude_bin: Path, monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The worker's own environment: the CLI on PATH, and secrets the agent must not see."""
    monkeypatch.setenv("PATH", f"{claude_bin.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_API_KEY)
    monkeypatch.setenv("GITHUB_TOKEN", GITHUB_TOKEN)
    monkeypatch.setenv("REDIS_URL", REDIS_URL)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    return monkeypatch


@pytest.fixture
def story_repo(tmp_path: Path) -> Path:
    """A repository whose test fails until greet.py exists."""
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_greet.py").write_text(
        "from greet import greet\n\n\ndef test_greet():\n    assert greet('Ada') == 'Hello, Ada!'\n"
    )
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "chore: failing test for US-001")
    return repo


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def story_call(tmp_path: Path, cwd: Path, timeout_s: float = 120) -> AgentCall:
    prompt_file = tmp_path / "prompt.md"
    prompt_file.write_text(PROMPT + "\n")
    (tmp_path / "run").mkdir(exist_ok=True)
    return AgentCall(
        prompt_file=prompt_file,
        cwd=cwd,
        run_dir=tmp_path / "run",
        home_dir=tmp_path / "home",
        log_path=tmp_path / "run" / "iteration-1.log",
        timeout_s=timeout_s,
        model=MODEL,
        max_turns=10,
    )


def run_claude(
    server: FakeAnthropic, tmp_path: Path, cwd: Path, monkeypatch: pytest.MonkeyPatch, **kw: Any
) -> tuple[AgentOutcome, AgentCall]:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    cancel = kw.pop("cancel", None)
    call = story_call(tmp_path, cwd, **kw)
    runner = make_runner(AgentSettings(runner="claude"), redactor=Redactor(), source_env=os.environ)
    return runner.run(call, cancel=cancel), call


def result_line(log_path: Path) -> dict[str, Any]:
    for line in reversed(log_path.read_text().splitlines()):
        if line.startswith("{") and json.loads(line).get("type") == "result":
            event: dict[str, Any] = json.loads(line)
            return event
    raise AssertionError(f"no result line in {log_path}")


def test_implements_a_story_with_write_and_bash(
    agent_env: pytest.MonkeyPatch, story_repo: Path, tmp_path: Path
) -> None:
    usages = [
        Usage(input_tokens=1200, output_tokens=90, cache_read_tokens=4000),
        Usage(input_tokens=300, output_tokens=40, cache_read_tokens=5200),
        Usage(input_tokens=150, output_tokens=25, cache_read_tokens=5500),
    ]
    script = [
        use(
            ToolCall("Write", {"file_path": str(story_repo / "greet.py"), "content": GREET_SOURCE}),
            usage=usages[0],
        ),
        use(
            ToolCall("Bash", {"command": f'git add -A && git commit -m "{COMMIT_MESSAGE}"'}),
            usage=usages[1],
        ),
        say("Implemented greet() and committed it.", usage=usages[2]),
    ]
    with fake_anthropic(script) as server:
        outcome, call = run_claude(server, tmp_path, story_repo, agent_env)
    requests = server.message_requests()

    assert outcome.error is None, outcome.error
    assert outcome.ok and outcome.exit_code == 0
    assert outcome.result_text == "Implemented greet() and committed it."
    assert (story_repo / "greet.py").read_text() == GREET_SOURCE
    assert (
        git(story_repo, "log", "-1", "--format=%s|%an|%ae")
        == f"{COMMIT_MESSAGE}|{COMMITTER_NAME}|{COMMITTER_EMAIL}"
    )
    assert git(story_repo, "status", "--porcelain") == ""
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=story_repo
    )
    assert tests.returncode == 0

    # The CLI sums every reply's usage; the cached reads count as input sent.
    assert outcome.input_tokens == sum(u.input_tokens + u.cache_read_tokens for u in usages)
    assert outcome.output_tokens == sum(u.output_tokens for u in usages)
    # Cost comes from the CLI's own price table: take it from the line it printed.
    result = result_line(call.log_path)
    assert outcome.cost_usd == result["total_cost_usd"]
    assert outcome.cost_usd is not None and outcome.cost_usd > 0

    assert len(requests) == 3
    assert requests[0].prompt().strip() == PROMPT
    assert f"Primary working directory: {story_repo}" in requests[0].context_text()
    written, committed = requests[1].tool_results(), requests[2].tool_results()
    assert [r["tool_use_id"] for r in written] == ["toolu_fake000000"]
    assert not written[0].get("is_error")
    assert COMMIT_MESSAGE in tool_result_text(committed[0])
    assert not committed[0].get("is_error")


def test_refused_tools_make_the_outcome_an_error(
    agent_env: pytest.MonkeyPatch, story_repo: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    prd = tmp_path / "run" / "prd.json"  # the run folder is open to it through --add-dir
    script = [
        use(ToolCall("Write", {"file_path": str(prd), "content": "{}\n"})),
        use(ToolCall("Write", {"file_path": str(outside), "content": "escaped\n"})),
        use(ToolCall("Bash", {"command": "curl -s http://127.0.0.1:9/"})),
        say("Done, I think."),
    ]
    with fake_anthropic(script) as server:
        outcome, _ = run_claude(server, tmp_path, story_repo, agent_env)
    results = [r.tool_results()[0] for r in server.message_requests()[1:]]

    assert outcome.exit_code == 0  # the CLI itself reports success
    assert not outcome.ok
    assert outcome.error is not None
    assert f"Write {outside}" in outcome.error
    assert "Bash curl -s http://127.0.0.1:9/" in outcome.error
    assert not outside.exists()
    assert prd.read_text() == "{}\n"
    assert "prd.json" not in outcome.error
    assert [bool(r.get("is_error")) for r in results] == [False, True, True]


def test_agent_sees_no_worker_secrets_and_its_key_stays_out_of_the_log(
    agent_env: pytest.MonkeyPatch, story_repo: Path, tmp_path: Path
) -> None:
    # The default rules allow python3, which reads the environment as well as `env` would.
    dump_env = "python3 -c 'import os; print(sorted(os.environ.items()))'"
    script = [
        use(ToolCall("Bash", {"command": dump_env})),
        say(f"My key is {FAKE_API_KEY}."),
    ]
    with fake_anthropic(script) as server:
        outcome, call = run_claude(server, tmp_path, story_repo, agent_env)
    requests = server.message_requests()
    seen = tool_result_text(requests[1].tool_results()[0])
    log = call.log_path.read_text()

    assert outcome.error is None, outcome.error
    assert f"('ANTHROPIC_BASE_URL', '{server.url}')" in seen
    assert f"('HOME', '{call.home_dir}')" in seen
    for secret in ("GITHUB_TOKEN", GITHUB_TOKEN, "REDIS_URL", REDIS_URL):
        assert secret not in seen
    assert requests[0].headers["x-api-key"] == FAKE_API_KEY  # the key did reach the agent
    assert "ANTHROPIC_BASE_URL" in log  # the env dump was logged...
    assert FAKE_API_KEY not in log  # ...with the key hidden, in tool output and final text
    assert FAKE_API_KEY not in outcome.result_text
    assert "[REDACTED]" in outcome.result_text
    # The run's HOME may live in the run folder: no saved transcript may keep the key there.
    key = FAKE_API_KEY.encode()
    kept = [p for p in call.home_dir.rglob("*") if p.is_file() and key in p.read_bytes()]
    assert kept == []


def test_an_api_error_ends_the_call_with_its_reason(
    agent_env: pytest.MonkeyPatch, story_repo: Path, tmp_path: Path
) -> None:
    with fake_anthropic([fail(401)] * 5) as server:
        outcome, _ = run_claude(server, tmp_path, story_repo, agent_env)

    assert outcome.exit_code == 1
    assert outcome.error is not None
    assert "api_error" in outcome.error and "401" in outcome.error
    # A small retry budget: a bad key must not be retried for minutes.
    assert 1 < len(server.message_requests()) < 5


def test_a_cancelled_call_stops_at_once_with_everything_it_started(
    agent_env: pytest.MonkeyPatch, story_repo: Path, tmp_path: Path
) -> None:
    pid_file = story_repo / "background.pid"
    script = start_in_background_then_stall(pid_file)
    cancel = threading.Event()
    with fake_anthropic(script) as server:
        canceller = threading.Thread(
            target=cancel_when_started, args=(server, pid_file, cancel), daemon=True
        )
        canceller.start()
        outcome, call = run_claude(server, tmp_path, story_repo, agent_env, cancel=cancel)
        canceller.join()

    assert cancel.is_set()
    assert not outcome.timed_out and outcome.exit_code is None
    assert outcome.error == "cancelled"
    assert not running(int(pid_file.read_text()))
    assert processes_with_env(f"HOME={call.home_dir}") == []


def test_a_stalled_api_is_killed_at_the_timeout_with_everything_it_started(
    agent_env: pytest.MonkeyPatch, story_repo: Path, tmp_path: Path
) -> None:
    pid_file = story_repo / "background.pid"
    script = start_in_background_then_stall(pid_file)
    with fake_anthropic(script) as server:
        outcome, call = run_claude(server, tmp_path, story_repo, agent_env, timeout_s=10)
        requests = server.message_requests()

    assert len(requests) == 2  # the second request is the one that never got an answer
    assert not requests[1].tool_results()[0].get("is_error")
    assert outcome.timed_out and outcome.exit_code is None
    assert outcome.error is not None and "timed out after 10s" in outcome.error
    assert pid_file.exists()
    assert not running(int(pid_file.read_text()))
    assert processes_with_env(f"HOME={call.home_dir}") == []


def cancel_when_started(server: FakeAnthropic, pid_file: Path, cancel: threading.Event) -> None:
    """Cancel once the CLI waits on its second reply and its background command runs."""
    if not server.wait_for_messages(2, timeout_s=120):
        return
    deadline = time.monotonic() + 120
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    cancel.set()


def start_in_background_then_stall(pid_file: Path) -> list[Turn]:
    """A script: run a long sleeper in the background, then never answer again."""
    command = background_sleeper(pid_file)
    return [use(ToolCall("Bash", {"command": command, "run_in_background": True})), stall()]


def background_sleeper(pid_file: Path) -> str:
    """A command that records its pid and sleeps long after any test would have ended."""
    return (
        "python3 -c 'import os, time; "
        f'open("{pid_file}", "w").write(str(os.getpid())); time.sleep(600)\''
    )


def processes_with_env(entry: str) -> list[int]:
    """Pids of live processes whose environment holds this exact entry."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if entry.encode() in environ:
            found.append(int(proc.name))
    return found


def test_output_without_a_result_line_is_an_error_with_its_tail(
    story_repo: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "bin" / "claude"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\necho 'cannot parse settings.json'\nexit 3\n")
    broken.chmod(0o755)
    runner = ClaudeRunner(
        AgentSettings(runner="claude"), redactor=Redactor(), source_env={"PATH": str(broken.parent)}
    )

    outcome = runner.run(story_call(tmp_path, story_repo))

    assert outcome.exit_code == 3
    assert outcome.error is not None
    assert outcome.error.startswith("no result line (exit code 3)")
    assert "cannot parse settings.json" in outcome.error


def test_a_missing_cli_is_reported_before_anything_runs(story_repo: Path, tmp_path: Path) -> None:
    runner = ClaudeRunner(
        AgentSettings(runner="claude"), redactor=Redactor(), source_env={"PATH": str(tmp_path)}
    )

    with pytest.raises(AgentError, match="Claude Code CLI"):
        runner.run(story_call(tmp_path, story_repo))


def test_a_blind_reviewers_call_has_only_tools_that_read_and_write_its_report(
    agent_env: pytest.MonkeyPatch, story_repo: Path, tmp_path: Path
) -> None:
    # The reviewer reads a change the implementer wrote: Bash would let it run that code (or
    # anything the change's text talks it into), Edit would let it change what it reviews.
    marker = story_repo / "ran.txt"
    report = tmp_path / "run" / "description.json"  # its hand-over folder (--add-dir)
    tested = story_repo / "tests" / "test_greet.py"
    script = [
        use(ToolCall("Bash", {"command": f"python3 -c \"open('{marker}', 'w').write('x')\""})),
        use(ToolCall("Edit", {"file_path": str(tested), "old_string": "Ada", "new_string": "Bob"})),
        use(ToolCall("Write", {"file_path": str(report), "content": "{}\n"})),
        say("Reported."),
    ]  # fmt: skip
    with fake_anthropic(script) as server:
        agent_env.setenv("ANTHROPIC_BASE_URL", server.url)
        call = replace(story_call(tmp_path, story_repo), read_only=True)
        runner = make_runner(
            AgentSettings(runner="claude"), redactor=Redactor(), source_env=os.environ
        )
        runner.run(call)
    requests = server.message_requests()

    offered = [{tool["name"] for tool in r.body.get("tools", [])} - CLI_OWN for r in requests]
    assert offered and all(names == set(REVIEW_TOOLS) for names in offered), offered
    results = [r.tool_results()[0] for r in requests[1:]]
    assert [bool(r.get("is_error")) for r in results] == [True, True, False]
    assert not marker.exists()
    assert "Ada" in tested.read_text()
    assert report.read_text() == "{}\n"
