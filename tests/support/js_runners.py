"""Install the pinned JavaScript test runners (jest, vitest) once for the tests."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

CACHE = Path(__file__).resolve().parents[2] / ".cache"
PINNED = {"jest": "29.7.0", "vitest": "1.6.0"}
INSTALL_TIMEOUT_S = 900


class RunnerUnavailable(RuntimeError):
    """The pinned runner could not be installed; the message says what to fix."""


def install_runner(name: str) -> Path:
    """The pinned runner's install folder (its `node_modules` inside), installed with npm from
    the registry on first use under the repository's `.cache/`. A file lock makes parallel
    test processes share one install."""
    version = PINNED[name]
    prefix = CACHE / f"{name}-{version}"
    binary = prefix / "node_modules" / ".bin" / name
    prefix.mkdir(parents=True, exist_ok=True)
    with (prefix / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            _npm_install(prefix, f"{name}@{version}")
    return prefix


def link_into(repo: Path, name: str) -> None:
    """Make the pinned runner the repository's own: `node_modules` a link to the install, as
    an `npm ci` would leave it (kept out of git by the repository's .gitignore)."""
    (repo / "node_modules").symlink_to(install_runner(name) / "node_modules")


def _npm_install(prefix: Path, spec: str) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise RunnerUnavailable(f"npm is not on PATH: install Node.js and npm to install {spec}")
    argv = [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", spec]
    done = subprocess.run(
        argv, cwd=prefix, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        raise RunnerUnavailable(
            f"`npm install {spec}` failed with exit code {done.returncode}:\n"
            f"{(done.stdout + done.stderr)[-4000:]}"
        )
