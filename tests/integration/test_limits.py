"""A call that forks or allocates without end is stopped by its limits; the worker goes on."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from bot.exceptions import ConfigurationError
from bot.ops.settings import load_settings
from worker.confine.limits import (
    Mechanism,
    ResourceLimits,
    call_limits,
    limits_from,
    process_mechanism,
)
from worker.confine.processes import ProcessOutcome, run_process
from worker.confine.redact import Redactor
from worker.confine.sandbox import Sandbox, SandboxMode, make_sandbox, tool_paths

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

PYTHON = "/usr/bin/python3"
# Forks children that wait, up to 5,000 (bounded, should the limit not hold): prints how
# many it got, and fails when a fork was refused, as an agent's tool would.
FORK_BOMB = """
import os, sys, time
children = []
try:
    for _ in range(5000):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        children.append(pid)
except OSError as error:
    print(f"forked {len(children)} then: {error}", flush=True)
    sys.exit(3)
print(f"forked all {len(children)}", flush=True)
"""
MEMORY_HOG = """
import sys
hog = bytearray(2 * 1024 ** 3)
hog[::4096] = b"x" * len(hog[::4096])
print("allocated", len(hog), flush=True)
"""


def run_agent(tmp_path: Path, sandbox: Sandbox, code: str) -> ProcessOutcome:
    worktree = tmp_path / "worktree"
    worktree.mkdir(exist_ok=True)
    script = tmp_path / "bin" / "agent"
    script.parent.mkdir(exist_ok=True)
    script.write_text(f"#!{PYTHON}\n{code}")
    script.chmod(0o755)
    confined = sandbox.bind(readonly=tool_paths(script.name, str(script.parent)))
    return run_process(
        [str(script)],
        cwd=worktree,
        env={"PATH": "/usr/bin:/bin"},
        timeout_s=120,
        log_path=tmp_path / "agent.log",
        redactor=Redactor(),
        grace_s=1,
        sandbox=confined,
    )


@pytest.fixture
def app_sandbox() -> Sandbox:
    sandbox = make_sandbox(SandboxMode.ON)
    assert sandbox is not None
    return sandbox


def test_a_fork_bomb_is_stopped_by_the_pids_limit(tmp_path: Path, app_sandbox: Sandbox) -> None:
    limited = replace(app_sandbox, limits=ResourceLimits(pids=64))
    outcome = run_agent(tmp_path, limited, FORK_BOMB)
    assert outcome.exit_code == 3, outcome.output_tail
    forked = int(outcome.output_tail.split("forked ")[1].split()[0])
    assert forked < 64
    # The worker's own processes are untouched and it can still start new ones.
    assert psutil.Process().is_running()
    again = run_agent(tmp_path, limited, "print('still here')")
    assert again.exit_code == 0 and "still here" in again.output_tail


def test_a_memory_hog_is_stopped_by_the_memory_limit(tmp_path: Path, app_sandbox: Sandbox) -> None:
    limited = replace(app_sandbox, limits=ResourceLimits(memory_mib=256))
    outcome = run_agent(tmp_path, limited, MEMORY_HOG)
    assert outcome.exit_code != 0
    assert "allocated" not in outcome.output_tail
    unlimited = run_agent(tmp_path, app_sandbox, "print(len(bytearray(300 * 1024 ** 2)))")
    assert unlimited.exit_code == 0, unlimited.output_tail


def test_a_calls_cgroup_is_removed_after_it(tmp_path: Path) -> None:
    mechanism = process_mechanism()
    if not mechanism.parents:
        pytest.skip(f"no cgroup here: limits by {mechanism.name}")
    parent = mechanism.parents[0][1]
    before = {p.name for p in parent.iterdir() if p.name.startswith("reqdrive-")}
    with call_limits(ResourceLimits()) as limits:
        during = {p.name for p in parent.iterdir() if p.name.startswith("reqdrive-")}
        assert limits.mechanism.startswith("cgroup")
    after = {p.name for p in parent.iterdir() if p.name.startswith("reqdrive-")}
    assert during - before
    assert not after - before


def test_cgroups_a_killed_worker_left_are_removed_at_start() -> None:
    mechanism = process_mechanism()
    if not mechanism.parents:
        pytest.skip(f"no cgroup here: limits by {mechanism.name}")
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid now names no process: a worker killed mid-call
    parent = mechanism.parents[0][1]
    left = parent / f"reqdrive-{gone.pid}-0123456789ab"
    left.mkdir()
    try:
        process_mechanism.cache_clear()
        process_mechanism()
        assert not left.exists()
    finally:
        if left.exists():
            left.rmdir()


def test_limits_come_from_their_variables() -> None:
    limits = limits_from({"REQDRIVE_LIMIT_PIDS": "64", "REQDRIVE_SCAN_DEADLINE_S": "2.5"})
    assert (limits.pids, limits.scan_deadline_s) == (64, 2.5)
    assert limits.memory_mib == ResourceLimits().memory_mib
    with pytest.raises(ValueError, match="REQDRIVE_LIMIT_MEMORY_MIB"):
        limits_from({"REQDRIVE_LIMIT_MEMORY_MIB": "lots"})
    with pytest.raises(ValueError, match="REQDRIVE_DISK_QUOTA_MIB"):
        limits_from({"REQDRIVE_DISK_QUOTA_MIB": "0"})


def test_where_no_cgroup_can_be_made_rlimits_bound_each_process(tmp_path: Path) -> None:
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        pytest.skip("prlimit (util-linux) not installed")
    rlimits = Mechanism("rlimit", (), prlimit)
    with call_limits(ResourceLimits(memory_mib=256, file_mib=1), mechanism=rlimits) as limits:
        assert limits.mechanism == "rlimit"
        hog = subprocess.run([*limits.prefix, PYTHON, "-c", MEMORY_HOG], capture_output=True)
        big = tmp_path / "big"
        writer = f"open({str(big)!r}, 'wb').write(b'x' * 2 * 1024 * 1024)"
        writes = subprocess.run([*limits.prefix, PYTHON, "-c", writer], capture_output=True)
    assert hog.returncode != 0 and b"MemoryError" in hog.stderr
    assert writes.returncode != 0  # SIGXFSZ, or "File too large"
    assert big.stat().st_size <= 1024 * 1024
    # RLIMIT_NPROC is the uid's running tasks plus the allowance, so the uid's own processes
    # never use up the call's share.
    nproc = next(arg for arg in limits.prefix if arg.startswith("--nproc="))
    assert int(nproc.removeprefix("--nproc=")) > 1024


def test_the_workers_settings_carry_the_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "s3cret")
    monkeypatch.setenv("REQDRIVE_LIMIT_PIDS", "64")
    monkeypatch.setenv("REQDRIVE_REPORT_MAX_CASES", "500")
    limits = load_settings().limits()
    assert (limits.pids, limits.report_cases) == (64, 500)
    assert limits.disk_quota_mib == ResourceLimits().disk_quota_mib
    monkeypatch.setenv("REQDRIVE_LIMIT_MEMORY_MIB", "0")
    with pytest.raises(ConfigurationError, match="REQDRIVE_LIMIT_MEMORY_MIB"):
        load_settings()
