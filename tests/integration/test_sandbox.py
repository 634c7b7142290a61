"""Agents that attack the worker get nothing: each test is a real executable in the sandbox."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from worker.confine.processes import ProcessOutcome, run_process
from worker.confine.redact import Redactor
from worker.confine.sandbox import Sandbox, SandboxMode, make_sandbox, tool_paths

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

PRIVATE_KEY = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAsandboxtestkey\n"
    "-----END RSA PRIVATE KEY-----\n"
)
WEBHOOK_SECRET = "webhook-secret-7d41c9e2aa"
REDIS_URL = "redis://:redis-pass-5be1@127.0.0.1:6379/0"


@pytest.fixture
def worker_secrets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The worker's own environment and key file, as the App's worker holds them."""
    key_file = tmp_path / "work" / "app-key.pem"
    key_file.parent.mkdir(parents=True)
    key_file.write_text(PRIVATE_KEY)
    monkeypatch.setenv("GITHUB_PRIVATE_KEY", PRIVATE_KEY)
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", WEBHOOK_SECRET)
    monkeypatch.setenv("REDIS_URL", REDIS_URL)
    return key_file


@pytest.fixture
def app_sandbox() -> Sandbox:
    sandbox = make_sandbox(SandboxMode.ON)
    assert sandbox is not None
    return sandbox


def agent(tmp_path: Path, script: str) -> Path:
    """A shell agent installed as an executable outside the worktree, as a CLI would be."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / "attacker"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


def run_agent(
    tmp_path: Path, sandbox: Sandbox, script: str, *, timeout_s: float = 60
) -> tuple[ProcessOutcome, Path]:
    worktree = tmp_path / "work" / "cache" / "worktrees" / "run-1"
    home = tmp_path / "work" / "homes" / "run-1"
    for folder in (worktree, home / "tmp"):
        folder.mkdir(parents=True, exist_ok=True)
    program = agent(tmp_path, script)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(home / "tmp")}
    confined = sandbox.bind(writable=[home], readonly=tool_paths(program.name, str(program.parent)))
    outcome = run_process(
        [str(program)],
        cwd=worktree,
        env=env,
        timeout_s=timeout_s,
        log_path=tmp_path / "work" / "runs" / "run-1" / "agent.log",
        redactor=Redactor(),
        grace_s=1,
        sandbox=confined,
    )
    return outcome, worktree


def test_the_worker_environment_and_proc_are_out_of_reach(
    tmp_path: Path, worker_secrets: Path, app_sandbox: Sandbox
) -> None:
    script = f"""
exec > loot.txt 2>&1
echo "ppid=$PPID"
cat /proc/$PPID/environ; echo
cat /proc/1/environ; echo
for f in /proc/[0-9]*/environ; do cat "$f"; echo; done
grep -rs -- "PRIVATE KEY" /proc/*/environ /proc/*/cmdline
cat {worker_secrets}
env
ls /proc
"""
    outcome, worktree = run_agent(tmp_path, app_sandbox, script)
    assert outcome.exit_code == 0
    loot = (worktree / "loot.txt").read_text()
    assert "ppid=" in loot  # the agent ran and wrote what it found
    for secret in ("RSA PRIVATE KEY", "sandboxtestkey", WEBHOOK_SECRET, "redis-pass-5be1"):
        assert secret not in loot
    assert "No such file" in loot  # the key file does not exist in there
    # Only the sandbox's own processes are listed: its PID 1, the agent and its tools.
    pids = [int(name) for name in loot.split() if name.isdigit()]
    assert pids and max(pids) < 100


def test_writes_outside_the_worktree_fail(
    tmp_path: Path, worker_secrets: Path, app_sandbox: Sandbox
) -> None:
    work = tmp_path / "work"
    (work / "cache" / "worktrees" / "other-run").mkdir(parents=True)
    targets = [
        work / "runs" / "run-1" / "checkpoint.json",
        work / "cache" / "worktrees" / "other-run" / "planted",
        work / "cache" / "mirrors" / "planted",
        work / "planted",
        Path("/usr/local/planted-by-agent"),
    ]
    script = "".join(
        f"mkdir -p {t.parent} 2>/dev/null; echo owned > {t} 2>/dev/null && echo wrote {t}\n"
        for t in targets
    )
    script += "echo mine > mine.txt; echo home > $HOME/home.txt; echo tmp > $TMPDIR/t.txt\n"
    script += f"rm -f {worker_secrets} && echo removed key\n"
    outcome, worktree = run_agent(tmp_path, app_sandbox, script)
    assert outcome.exit_code == 0
    for target in targets:
        assert not target.exists(), target
    assert worker_secrets.read_text() == PRIVATE_KEY
    assert (worktree / "mine.txt").read_text() == "mine\n"
    assert (work / "homes" / "run-1" / "home.txt").exists()


def test_no_process_outlives_the_call(tmp_path: Path, app_sandbox: Sandbox) -> None:
    # Three ways out of a process group and its marker; each sleeper names a unique duration.
    script = """
setsid sleep 7771 >/dev/null 2>&1 &
env -i setsid sleep 7772 >/dev/null 2>&1 &
env -u REQDRIVE_PROCESS_MARK sh -c 'sh -c "sleep 7773 >/dev/null 2>&1 &" &'
sleep 0.3
echo started
"""
    outcome, _ = run_agent(tmp_path, app_sandbox, script)
    assert outcome.exit_code == 0
    assert "started" in outcome.output_tail
    assert sleepers(("7771", "7772", "7773")) == []


def test_a_sandbox_that_cannot_start_says_what_to_do() -> None:
    from worker.exceptions import SandboxUnavailable

    with pytest.raises(SandboxUnavailable, match="REQDRIVE_SANDBOX=off"):
        Sandbox(bwrap="bwrap-not-installed-here").check()


def test_off_runs_unconfined_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    assert make_sandbox(SandboxMode.OFF) is None
    assert "UNCONFINED" in caplog.text


def sleepers(durations: tuple[str, ...]) -> list[int]:
    """Host pids of live `sleep N` processes for these N."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[:1] == [b"sleep"] and argv[1:2] and argv[1].decode() in durations:
            found.append(int(entry.name))
    return found


def test_tool_paths_find_an_npm_installed_cli(tmp_path: Path) -> None:
    package = tmp_path / "prefix" / "node_modules" / "@scope" / "cli"
    package.mkdir(parents=True)
    (package / "cli.js").write_text("#!/usr/bin/env node\n")
    (package / "cli.js").chmod(0o755)
    bin_dir = tmp_path / "prefix" / "node_modules" / ".bin"
    bin_dir.mkdir()
    os.symlink(package / "cli.js", bin_dir / "cli")
    assert tool_paths("cli", str(bin_dir)) == [bin_dir, tmp_path / "prefix" / "node_modules"]
    assert tool_paths("no-such-cli", str(bin_dir)) == []


def test_the_sandbox_runs_the_bwrap_found_at_start_whatever_path_a_call_later_has(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sandbox = make_sandbox(SandboxMode.ON)
    assert sandbox is not None
    found = shutil.which("bwrap")
    assert sandbox.bwrap == found
    # A PATH that would find another bwrap first is never consulted again.
    decoy = tmp_path / "bin"
    decoy.mkdir()
    (decoy / "bwrap").write_text("#!/bin/sh\nexit 0\n")
    (decoy / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{decoy}{os.pathsep}{os.environ['PATH']}")
    argv, _ = sandbox.wrap(["true"], cwd=tmp_path, env={})
    assert argv[0] == found
