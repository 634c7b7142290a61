"""`reqdrive doctor` as a real process: each missing piece named with its fix, and the exit code."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]
ROOT = Path(__file__).resolve().parents[2]


def doctor(cwd: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GITHUB_", "REQDRIVE_")) and k != "REDIS_URL"
    }
    env.update({"PYTHONPATH": str(ROOT), "GITHUB_WEBHOOK_SECRET": "doctor-secret", **variables})
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", "doctor"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def fake_node(folder: Path) -> Path:
    """A toolchain installed outside /usr, the way nvm, pyenv or a venv install them."""
    bin_dir = folder / "toolchain" / "bin"
    bin_dir.mkdir(parents=True)
    node = bin_dir / "node"
    node.write_text("#!/bin/sh\necho v99.0.0-doctor\n")
    node.chmod(0o755)
    return bin_dir


def test_a_toolchain_the_sandbox_cannot_see_is_named_with_the_setting_that_shows_it(
    tmp_path: Path,
) -> None:
    bin_dir = fake_node(tmp_path)
    path = f"{bin_dir}:/usr/bin:/bin"
    agent = {"REQDRIVE_AGENT": "command", "REQDRIVE_AGENT_COMMAND": "true {prompt_file}"}

    hidden = doctor(tmp_path, PATH=path, **agent)
    assert hidden.returncode == 1, hidden.stdout + hidden.stderr
    lines = hidden.stdout.splitlines()
    # Debian's node in /usr/bin answers inside the sandbox: the checks would run that one.
    assert (
        any(
            line.startswith("FAIL  toolchain node: the sandbox runs another node (")
            and line.endswith("than this PATH finds (v99.0.0-doctor)")
            for line in lines
        )
        or "FAIL  toolchain node: installed, but the sandbox cannot start it" in lines
    )
    assert f"       fix: add its install to REQDRIVE_SANDBOX_READONLY (e.g. {bin_dir}" in (
        hidden.stdout
    )
    assert lines[-1].endswith("to fix")

    shown = doctor(tmp_path, PATH=path, REQDRIVE_SANDBOX_READONLY=str(bin_dir), **agent)
    assert shown.returncode == 0, shown.stdout
    assert "ok    toolchain node: v99.0.0-doctor" in shown.stdout.splitlines()
    assert shown.stdout.splitlines()[-1] == "reqdrive can run here"


def test_go_is_asked_its_version_the_way_go_answers(tmp_path: Path) -> None:
    # `go --version` is an error (exit 2): asked that way, every machine with Go "failed".
    bin_dir = tmp_path / "toolchain" / "bin"
    bin_dir.mkdir(parents=True)
    go = bin_dir / "go"
    go.write_text('#!/bin/sh\n[ "$1" = version ] || exit 2\necho go version go9.9 doctor\n')
    go.chmod(0o755)
    agent = {"REQDRIVE_AGENT": "command", "REQDRIVE_AGENT_COMMAND": "true {prompt_file}"}
    done = doctor(
        tmp_path, PATH=f"{bin_dir}:/usr/bin:/bin", REQDRIVE_SANDBOX_READONLY=str(bin_dir), **agent
    )
    assert "ok    toolchain go: go version go9.9 doctor" in done.stdout.splitlines(), done.stdout


def test_a_missing_agent_cli_and_a_silent_redis_are_failures_with_their_fixes(
    tmp_path: Path,
) -> None:
    done = doctor(
        tmp_path,
        PATH="/usr/bin:/bin",
        REQDRIVE_AGENT="codex",
        REDIS_URL="redis://127.0.0.1:1/0",
    )
    assert done.returncode == 1
    out = done.stdout
    assert "FAIL  agent (codex): codex does not start" in out
    assert "FAIL  redis: REDIS_URL does not answer" in out
    assert "ok    git: git version" in out
    # No App identity: deliveries are still verified and queued, so a warning, not a failure.
    assert "warn  App identity: GITHUB_APP_ID and GITHUB_PRIVATE_KEY" in out
    assert done.stdout.splitlines()[-1] == "2 to fix"


def test_without_the_webhook_secret_doctor_names_the_variable_and_stops_there(
    tmp_path: Path,
) -> None:
    env_vars = {"PATH": "/usr/bin:/bin", "GITHUB_WEBHOOK_SECRET": ""}
    done = doctor(tmp_path, **env_vars)
    assert done.returncode == 1
    assert "FAIL  settings:" in done.stdout and "GITHUB_WEBHOOK_SECRET" in done.stdout
    assert "Traceback" not in done.stderr
