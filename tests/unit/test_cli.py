"""The reqdrive command line: dispatch, refusals without a secret, the manifest and Procfile."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

from bot import cli
from bot.ops.replay import running_stack_url, signature
from bot.ops.startup import StackLock
from tests.support.ports import closed_port

ROOT = Path(__file__).resolve().parents[2]


def _env_without_secret() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("GITHUB_WEBHOOK_SECRET", None)
    return env


def _cli(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # A real process: what a user sees is stderr and the exit code, not an exception.
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("command", ["serve", "worker", "up"])
def test_refuses_to_start_without_the_webhook_secret(command: str, tmp_path: Path) -> None:
    result = _cli(command, tmp_path, _env_without_secret())
    assert result.returncode != 0
    assert "GITHUB_WEBHOOK_SECRET" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / ".reqdrive").exists()  # nothing was started


def test_worker_refuses_a_redis_that_does_not_answer(tmp_path: Path) -> None:
    with closed_port() as port:
        closed = f"redis://127.0.0.1:{port}/0"
        env = {**_env_without_secret(), "GITHUB_WEBHOOK_SECRET": "s", "REDIS_URL": closed}
        result = _cli("worker", tmp_path, env)
    assert result.returncode != 0
    assert "REDIS_URL does not answer" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_hands_every_argument_to_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    engine = types.ModuleType("worker.local.run_cli")

    def main(argv: list[str]) -> int:
        seen.append(argv)
        return 3

    monkeypatch.setattr(engine, "main", main, raising=False)
    monkeypatch.setitem(sys.modules, "worker.local.run_cli", engine)
    assert cli.main(["run", "docs/requirements/REQ-001-x.md", "--help"]) == 3
    assert seen == [["docs/requirements/REQ-001-x.md", "--help"]]


def test_web_server_runs_in_this_interpreter_on_the_given_address() -> None:
    argv = cli.web_server_argv("192.0.2.7", 8123)
    assert argv[:3] == [sys.executable, "-m", cli.WEB_SERVER[0]]
    assert any("8123" in arg for arg in argv)
    assert any("192.0.2.7" in arg for arg in argv)
    assert any("bot.web.asgi:create_asgi_app" in arg for arg in argv)


def test_replay_finds_the_url_of_the_running_stack_and_none_once_it_stopped(
    tmp_path: Path,
) -> None:
    lock = StackLock(tmp_path)
    lock.acquire("webhook URL http://127.0.0.1:3999/webhook")
    assert running_stack_url(lock.path) == "http://127.0.0.1:3999/webhook"
    lock.release()
    assert running_stack_url(lock.path) is None
    assert running_stack_url(tmp_path / "missing.lock") is None


def test_reqdrive_alone_prints_the_commands_each_with_a_description() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bot.cli"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    for command in ("up", "serve", "worker", "replay", "run", "init", "validate", "status"):
        assert f"    {command} " in result.stdout
    for command in ("up", "serve", "worker", "replay"):
        parser = cli.build_parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        assert len(sub.choices[command].description or "") > 60, command


def test_signature_matches_githubs_documented_example() -> None:
    # The test vector from GitHub's "Validating webhook deliveries" page.
    assert signature("It's a Secret to Everybody", b"Hello, World!") == (
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    )


def test_manifest_subscribes_to_the_events_and_least_permissions() -> None:
    manifest = yaml.safe_load((ROOT / "app.yml").read_text())
    assert set(manifest["default_events"]) == {
        "issues",
        "issue_comment",
        "push",
        "pull_request",
        "pull_request_review",  # review feedback (bot/jobs/feedback.py)
        "pull_request_review_comment",
        "check_suite",  # red CI (bot/jobs/ci_fix.py)
        "workflow_run",
    }
    assert manifest["default_permissions"] == {
        "contents": "write",
        "issues": "write",
        "pull_requests": "write",
        "checks": "write",
        "actions": "read",  # a failed workflow run's jobs and logs
        "metadata": "read",
    }
    assert manifest["hook_attributes"]["url"].endswith("/webhook")
    assert manifest["public"] is False


def test_procfile_runs_the_web_server_and_a_worker() -> None:
    processes = dict(
        line.split(":", 1)
        for line in (ROOT / "Procfile").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert processes["web"].split()[:2] == ["reqdrive", "serve"]
    assert processes["worker"].split() == ["reqdrive", "worker"]


def test_worker_refuses_to_start_when_no_sandbox_can_be_made(tmp_path: Path) -> None:
    # No bwrap on PATH, as on macOS or in a container without bubblewrap.
    env = {**_env_without_secret(), "GITHUB_WEBHOOK_SECRET": "s", "PATH": str(tmp_path)}
    env.pop("REQDRIVE_SANDBOX", None)
    result = _cli("worker", tmp_path, env)
    assert result.returncode != 0
    assert "bwrap is not installed" in result.stderr
    assert "apt-get install bubblewrap" in result.stderr
    assert "REQDRIVE_SANDBOX=off" in result.stderr
    assert "Traceback" not in result.stderr


def test_worker_with_the_sandbox_off_says_so_loudly(tmp_path: Path) -> None:
    with closed_port() as port:
        env = {
            **_env_without_secret(),
            "GITHUB_WEBHOOK_SECRET": "s",
            "REDIS_URL": f"redis://127.0.0.1:{port}/0",
            "REQDRIVE_SANDBOX": "off",
            "PATH": str(tmp_path),
        }
        result = _cli("worker", tmp_path, env)
    assert "UNCONFINED (REQDRIVE_SANDBOX=off)" in result.stderr  # what turned it off
    assert "bwrap" not in result.stderr  # off means not even looked for


def _worker_warnings(tmp_path: Path, *prefix: str) -> list[str]:
    """The worker's start as `prefix` runs it, against a Redis that is not there: its lines."""
    with closed_port() as port:
        env = {
            **_env_without_secret(),
            "GITHUB_WEBHOOK_SECRET": "s",
            "REDIS_URL": f"redis://127.0.0.1:{port}/0",
            "REQDRIVE_SANDBOX": "off",
            "REQDRIVE_LOG_FORMAT": "text",
        }
        result = subprocess.run(
            [*prefix, sys.executable, "-m", "bot.cli", "worker"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert "the Redis at REDIS_URL does not answer" in result.stderr  # it got that far
    return [line for line in result.stderr.splitlines() if "runs as root" in line]


@pytest.mark.skipif(os.geteuid() != 0, reason="the worker runs as this test's user")
def test_worker_run_as_root_warns_once_why(tmp_path: Path) -> None:
    [line] = _worker_warnings(tmp_path)
    assert "WARNING bot.worker: reqdrive worker runs as root" in line
    assert "holds the App's private key" in line and "service user" in line


@pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare(1) here")
def test_worker_run_as_another_user_does_not_warn(tmp_path: Path) -> None:
    # A user namespace without a mapping for root: the worker's uid is nobody's (65534).
    assert _worker_warnings(tmp_path, "unshare", "--user") == []
