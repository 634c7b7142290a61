"""What `up`, `serve` and `worker` check before starting: each failure one message, no trace."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bot.exceptions import ConfigurationError
from bot.ops.embedded_redis import EmbeddedRedis
from bot.ops.settings import load_settings
from bot.ops.startup import (
    StackLock,
    app_credentials_problem,
    ensure_port_free,
    ensure_redis_answers,
    port_number,
)
from tests.support.ports import closed_port

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GITHUB_", "REQDRIVE_")) and k != "REDIS_URL"
    }
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args],
        cwd=cwd,
        env={**base, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("text", ["0", "70000", "-1", "http"])
def test_a_port_outside_1_to_65535_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="port number"):
        port_number(text)
    assert port_number("65535") == 65535


@pytest.mark.parametrize("command", ["up", "serve"])
def test_port_70000_is_a_usage_error_not_a_traceback(command: str, tmp_path: Path) -> None:
    result = _cli(command, "--port", "70000", cwd=tmp_path, GITHUB_WEBHOOK_SECRET="s")
    assert result.returncode == 2
    assert "70000 is not a port number (1-65535)" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_port_in_use_is_named() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigurationError, match=f"port {port} on 127.0.0.1 is already in use"):
            ensure_port_free("127.0.0.1", port)


def test_serve_on_a_port_in_use_says_so(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = _cli("serve", "--port", port, cwd=tmp_path, GITHUB_WEBHOOK_SECRET="s")
    assert result.returncode == 2
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_closed_redis_url_says_up_can_start_its_own() -> None:
    with closed_port() as port:
        url = f"redis://:hunter2@127.0.0.1:{port}/0"
        with pytest.raises(ConfigurationError) as up_error:
            ensure_redis_answers(url, configured=True, command="up")
        with pytest.raises(ConfigurationError) as worker_error:
            ensure_redis_answers(url, configured=True, command="worker")
        with pytest.raises(ConfigurationError) as default_error:
            ensure_redis_answers(url, configured=False, command="worker")
    assert "unset REDIS_URL and `reqdrive up` starts an embedded Redis" in str(up_error.value)
    assert "does not answer" in str(worker_error.value)
    assert "set REDIS_URL" in str(default_error.value)
    assert "hunter2" not in str(up_error.value) + str(worker_error.value)


def test_worker_with_a_redis_url_without_a_scheme_is_one_message(tmp_path: Path) -> None:
    result = _cli("worker", cwd=tmp_path, GITHUB_WEBHOOK_SECRET="s", REDIS_URL="127.0.0.1:6379")
    assert result.returncode == 2
    assert "REDIS_URL: must start with redis://" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_app_credentials_are_a_warning_half_of_them_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("GITHUB_APP_ID", "GITHUB_PRIVATE_KEY", "GITHUB_PRIVATE_KEY_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "s")
    warning = app_credentials_problem(load_settings())
    assert warning is not None and not warning[0]
    assert "no job can reach GitHub" in warning[1]

    monkeypatch.setenv("GITHUB_APP_ID", "12")
    assert app_credentials_problem(load_settings()) == (
        True,
        "GITHUB_APP_ID is set but no key: set GITHUB_PRIVATE_KEY or its _PATH",
    )
    monkeypatch.setenv("GITHUB_PRIVATE_KEY_PATH", str(tmp_path / "missing.pem"))
    problem = app_credentials_problem(load_settings())
    assert problem is not None and problem[0] and "cannot be read" in problem[1]
    (tmp_path / "missing.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    assert app_credentials_problem(load_settings()) is None


def test_up_with_half_the_app_credentials_refuses_before_starting(tmp_path: Path) -> None:
    result = _cli("up", cwd=tmp_path, GITHUB_WEBHOOK_SECRET="s", GITHUB_APP_ID="12")
    assert result.returncode == 2
    assert "GITHUB_APP_ID is set but no key" in result.stderr
    assert not (tmp_path / ".reqdrive").exists()


def test_a_second_stack_lock_in_the_same_folder_is_refused_naming_the_first(
    tmp_path: Path,
) -> None:
    first, second = StackLock(tmp_path), StackLock(tmp_path)
    first.acquire("webhook URL http://127.0.0.1:3000/webhook")
    with pytest.raises(ConfigurationError) as error:
        second.acquire("webhook URL http://127.0.0.1:3001/webhook")
    assert f"pid {os.getpid()}, webhook URL http://127.0.0.1:3000/webhook" in str(error.value)
    assert "already running in this folder" in str(error.value)
    first.release()
    second.acquire("webhook URL http://127.0.0.1:3001/webhook")  # free once the first is gone
    second.release()


def test_embedded_redis_refuses_a_socket_another_server_answers_on(tmp_path: Path) -> None:
    first = EmbeddedRedis(tmp_path / "r", append_only=False)
    first.start()
    try:
        with pytest.raises(ConfigurationError, match="a Redis already answers on"):
            EmbeddedRedis(tmp_path / "r", append_only=False).start()
        assert first.socket_path.exists()  # the first server's socket is left alone
    finally:
        first.stop()


def test_version_names_the_installed_package(tmp_path: Path) -> None:
    result = _cli("--version", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.startswith("reqdrive 0.")
