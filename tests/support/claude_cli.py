"""Install the pinned Claude Code CLI once for the tests and say where its binary is."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

CLAUDE_CODE_PACKAGE = "@anthropic-ai/claude-code"
CLAUDE_CODE_VERSION = "2.1.329"
INSTALL_DIR = Path(__file__).resolve().parents[2] / ".cache" / "claude-code"
INSTALL_TIMEOUT_S = 900


class ClaudeCliUnavailable(RuntimeError):
    """The pinned CLI could not be installed; the message says what to fix."""


def install_claude_cli(prefix: Path = INSTALL_DIR) -> Path:
    """Return the `claude` binary of the pinned version, installing it with npm if needed.

    Parallel test workers share the install: a file lock makes the first one install and the
    others wait and then find it done.
    """
    binary = prefix / "node_modules" / ".bin" / "claude"
    prefix.mkdir(parents=True, exist_ok=True)
    with (prefix / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _answers_version(binary):
            return binary
        _npm_install(prefix)
        if not _answers_version(binary):
            # npm may skip the postinstall that puts the native binary in place of a stub.
            raise ClaudeCliUnavailable(
                f"{binary} does not answer `--version` with {CLAUDE_CODE_VERSION} after npm "
                "install; check that npm ran the package's postinstall script"
            )
    return binary


def _npm_install(prefix: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise ClaudeCliUnavailable(
            "npm is not on PATH: install Node.js and npm to run the Claude Code runner tests "
            f"(they install {CLAUDE_CODE_PACKAGE}@{CLAUDE_CODE_VERSION} into {prefix})"
        )
    spec = f"{CLAUDE_CODE_PACKAGE}@{CLAUDE_CODE_VERSION}"
    argv = [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", spec]
    done = subprocess.run(
        argv, cwd=prefix, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        raise ClaudeCliUnavailable(
            f"`npm install {spec}` failed with exit code {done.returncode}:\n"
            f"{(done.stdout + done.stderr)[-4000:]}"
        )


def _answers_version(binary: Path) -> bool:
    if not binary.exists():
        return False
    done = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    return done.returncode == 0 and done.stdout.split()[:1] == [CLAUDE_CODE_VERSION]
