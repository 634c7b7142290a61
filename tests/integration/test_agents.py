"""Agents run as real processes with a scrubbed environment, a timeout and a redacted log."""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.fake_agents import install
from tests.support.processes import running
from worker.agents.base import AgentCall, AgentSettings, agent_environment, fill_template
from worker.agents.command import CommandRunner
from worker.agents.registry import make_runner
from worker.confine.redact import REDACTED, Redactor
from worker.exceptions import AgentError

GITHUB_TOKEN = "ghs_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"
# Shaped like no known pattern: only its registration as an exact secret can hide it.
ANTHROPIC_KEY = "anthropic-test-key-Zq8Wm2Lp5Rt9"
OPENAI_KEY = "openai-test-key-Hv3Jk7Nb1Xc4"
WORKER_SECRETS = {
    "GITHUB_TOKEN": GITHUB_TOKEN,
    "REDIS_URL": "redis://:redis-password-123@redis.internal:6379/0",
    "GITHUB_WEBHOOK_SECRET": "webhook-secret-value",
    "GITHUB_PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
    "GITHUB_APP_ID": "12345",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
    "GIT_CONFIG_COUNT": "1",
}


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    return tmp_path / "bin"


@pytest.fixture
def source_env(bin_dir: Path) -> dict[str, str]:
    return {
        **WORKER_SECRETS,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "LC_FAKE_EXIT": "0",
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "OPENAI_API_KEY": OPENAI_KEY,
        "GIT_AUTHOR_NAME": "reqdrive",
    }


@pytest.fixture
def call(tmp_path: Path) -> AgentCall:
    # Spaces and shell syntax in every path: none of it may be interpreted.
    worktree = tmp_path / "work tree; $(touch pwned)"
    run_dir = tmp_path / "run dir"
    worktree.mkdir()
    run_dir.mkdir()
    prompt = run_dir / "iteration-1.prompt.md"
    prompt.write_text(f"Implement US-001\nThe deploy token is {GITHUB_TOKEN}.\n")
    return AgentCall(
        prompt_file=prompt,
        cwd=worktree,
        run_dir=run_dir,
        home_dir=tmp_path / "home",
        log_path=run_dir / "iteration-1.log",
        timeout_s=60,
    )


def command_runner(template: str, source_env: dict[str, str], redactor: Redactor) -> CommandRunner:
    settings = AgentSettings(runner="command", command=template)
    runner = make_runner(settings, redactor=redactor, source_env=source_env)
    assert isinstance(runner, CommandRunner)
    return runner


def scripted(bin_dir: Path) -> str:
    return shlex.quote(str(install(bin_dir, "scripted-agent", "scripted.py")))


def test_command_agent_gets_prompt_on_stdin_and_placeholders_as_whole_arguments(
    call: AgentCall, bin_dir: Path, source_env: dict[str, str]
) -> None:
    template = f"{scripted(bin_dir)} ok --prompt {{prompt_file}} --dirs={{cwd}}:{{run_dir}}"
    outcome = command_runner(template, source_env, Redactor()).run(call)
    assert outcome.ok
    seen = json.loads((call.cwd / "agent-was-here.txt").read_text())
    assert seen["argv"][1:] == [
        "ok",
        "--prompt",
        str(call.prompt_file),
        f"--dirs={call.cwd}:{call.run_dir}",
    ]
    assert seen["stdin"] == call.prompt_file.read_text()
    assert not list(call.cwd.parent.glob("pwned"))
    assert "implemented: Implement US-001" in outcome.result_text


def test_fill_template_never_splits_a_value() -> None:
    call = AgentCall(
        prompt_file=Path("/r/a b.md"),
        cwd=Path("/w/x'; rm -rf / #"),
        run_dir=Path("/r"),
        home_dir=Path("/h"),
        log_path=Path("/r/l.log"),
        timeout_s=1,
    )
    template = shlex.split("agent --in {prompt_file} -C '{cwd}' {run_dir}/prd.json")
    assert fill_template(template, call) == [
        "agent",
        "--in",
        "/r/a b.md",
        "-C",
        "/w/x'; rm -rf / #",
        "/r/prd.json",
    ]


def test_a_failing_agent_reports_its_exit_code_and_output(
    call: AgentCall, bin_dir: Path, source_env: dict[str, str]
) -> None:
    outcome = command_runner(f"{scripted(bin_dir)} fail 3", source_env, Redactor()).run(call)
    assert outcome.exit_code == 3
    assert not outcome.ok
    assert not outcome.timed_out
    assert "could not do it" in call.log_path.read_text()


def test_a_hanging_agent_is_killed_with_its_setsid_grandchild(
    call: AgentCall, bin_dir: Path, source_env: dict[str, str]
) -> None:
    settings = AgentSettings(runner="command", command=f"{scripted(bin_dir)} hang")
    runner = CommandRunner(settings, redactor=Redactor(), source_env=source_env, grace_s=1)
    hanging = replace(call, timeout_s=5)
    outcome = runner.run(hanging)
    assert outcome.timed_out
    assert outcome.exit_code is None
    assert not outcome.ok
    assert outcome.error == "timed out after 5s"
    assert "started a grandchild" in call.log_path.read_text()
    for name in ("child.pid", "grandchild.pid"):
        assert not running(int((call.cwd / name).read_text()))


def test_agent_environment_is_the_allowlist_only(
    call: AgentCall, bin_dir: Path, source_env: dict[str, str]
) -> None:
    dump = call.run_dir / "env.json"
    template = f"{scripted(bin_dir)} dump-env {{run_dir}}/env.json"
    assert command_runner(template, source_env, Redactor()).run(call).ok
    env = json.loads(dump.read_text())
    for name in WORKER_SECRETS:
        assert name not in env
    assert env["ANTHROPIC_API_KEY"] == ANTHROPIC_KEY
    assert env["HOME"] == str(call.home_dir)
    assert env["TMPDIR"] == str(call.home_dir / "tmp")
    assert (call.home_dir / "tmp").is_dir()
    assert set(env) == {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "LC_FAKE_EXIT",
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "GIT_AUTHOR_NAME",
        "REQDRIVE_PROCESS_MARK",
    }


def test_agent_environment_registers_the_keys_it_passes_as_secrets(tmp_path: Path) -> None:
    redactor = Redactor()
    env = agent_environment(
        tmp_path / "home",
        {"ANTHROPIC_API_KEY": ANTHROPIC_KEY, "LANG": "C.UTF-8", "GITHUB_TOKEN": "x" * 20},
        redactor=redactor,
    )
    assert env["PATH"]  # a default when the worker has none
    assert redactor.redact(f"key {ANTHROPIC_KEY} lang C.UTF-8") == f"key {REDACTED} lang C.UTF-8"


def test_the_agent_trusts_the_certificates_the_worker_was_told_to(tmp_path: Path) -> None:
    # Behind a TLS-inspecting proxy the model's API answers with the proxy's certificate:
    # Claude Code (Node) accepts it only through NODE_EXTRA_CA_CERTS.
    bundle = "/etc/ssl/certs/ca-certificates.crt"
    source = {"NODE_EXTRA_CA_CERTS": bundle, "SSL_CERT_FILE": bundle, "GITHUB_TOKEN": "x" * 20}
    env = agent_environment(tmp_path / "home", source)
    assert env["NODE_EXTRA_CA_CERTS"] == env["SSL_CERT_FILE"] == bundle
    assert "GITHUB_TOKEN" not in env


def test_what_an_agent_prints_reaches_the_log_redacted(
    call: AgentCall, bin_dir: Path, source_env: dict[str, str]
) -> None:
    outcome = command_runner(f"{scripted(bin_dir)} leak", source_env, Redactor()).run(call)
    assert outcome.ok
    log = call.log_path.read_text()
    assert "ANTHROPIC_API_KEY=" in log  # it did print its key...
    for secret in (ANTHROPIC_KEY, OPENAI_KEY, GITHUB_TOKEN):  # ...and none of it got through
        assert secret not in log
        assert secret not in outcome.result_text
    assert f"The deploy token is {REDACTED}." in log


def test_a_missing_agent_executable_is_an_agent_error(
    call: AgentCall, tmp_path: Path, source_env: dict[str, str]
) -> None:
    runner = command_runner(f"{tmp_path}/no-such-agent {{prompt_file}}", source_env, Redactor())
    with pytest.raises(AgentError, match="could not be started"):
        runner.run(call)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (AgentSettings(runner="gpt-engineer"), "unknown agent runner"),
        (AgentSettings(runner="command"), "needs a command template"),
        (AgentSettings(runner="command", command="agent 'unclosed"), "cannot be parsed"),
    ],
)
def test_bad_agent_settings_are_refused(settings: AgentSettings, message: str) -> None:
    with pytest.raises(AgentError, match=message):
        make_runner(settings, redactor=Redactor(), source_env={})


def test_claude_is_the_default_runner() -> None:
    runner = make_runner(AgentSettings(), redactor=Redactor(), source_env={})
    assert runner.name == "claude"


def test_codex_runs_exec_non_interactively_in_the_worktree(
    call: AgentCall, bin_dir: Path, source_env: dict[str, str]
) -> None:
    install(bin_dir, "codex", "recorder.py")
    settings = AgentSettings(runner="codex", model="gpt-5-codex")
    outcome = make_runner(settings, redactor=Redactor(), source_env=source_env).run(call)
    record = json.loads((call.home_dir / "agent-record.json").read_text())
    last_message = call.run_dir / "codex-last-message.md"
    assert outcome.ok
    assert record["argv"][1:] == [
        "exec",
        "--sandbox",
        "workspace-write",
        "--cd",
        str(call.cwd),
        "--add-dir",
        str(call.run_dir),
        "--skip-git-repo-check",
        "--color",
        "never",
        "--ephemeral",
        "--output-last-message",
        str(last_message),
        "--model",
        "gpt-5-codex",
        "-",
    ]
    assert record["cwd"] == str(call.cwd)
    assert record["stdin"] == call.prompt_file.read_text()
    assert_scrubbed(record["env"])
    # Its final message, which repeated its key, is kept redacted only.
    assert outcome.result_text == f"done, key was {REDACTED}\n"
    assert OPENAI_KEY not in last_message.read_text()


def test_aider_gets_one_message_and_never_commits(
    call: AgentCall, bin_dir: Path, source_env: dict[str, str]
) -> None:
    install(bin_dir, "aider", "recorder.py")
    settings = AgentSettings(runner="aider")
    with_model = replace(call, model="sonnet")
    outcome = make_runner(settings, redactor=Redactor(), source_env=source_env).run(with_model)
    record = json.loads((call.home_dir / "agent-record.json").read_text())
    argv = record["argv"]
    assert outcome.ok
    for flag in ("--yes-always", "--no-auto-commits", "--no-dirty-commits", "--no-gitignore"):
        assert flag in argv
    assert argv[argv.index("--message-file") + 1] == str(call.prompt_file)
    assert argv[-2:] == ["--model", "sonnet"]
    assert argv[argv.index("--chat-history-file") + 1].startswith(str(call.home_dir))
    assert record["cwd"] == str(call.cwd)
    assert_scrubbed(record["env"])


def test_codex_exit_code_is_reported(
    call: AgentCall, bin_dir: Path, source_env: dict[str, str]
) -> None:
    install(bin_dir, "codex", "recorder.py")
    failing = {**source_env, "LC_FAKE_EXIT": "2"}
    outcome = make_runner(
        AgentSettings(runner="codex"), redactor=Redactor(), source_env=failing
    ).run(call)
    assert outcome.exit_code == 2
    assert not outcome.ok
    assert "--model" not in json.loads((call.home_dir / "agent-record.json").read_text())["argv"]


def assert_scrubbed(env: dict[str, str]) -> None:
    for name in WORKER_SECRETS:
        assert name not in env
    assert env["OPENAI_API_KEY"] == OPENAI_KEY
