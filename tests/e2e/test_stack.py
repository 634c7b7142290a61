"""`reqdrive up` and `reqdrive worker` as real processes: start, serve, replay, stop everything."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from tests.support.ports import closed_port, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REQDRIVE = str(Path(sys.executable).parent / "reqdrive")
# The shipped sample (GitHub's example as an App receives it, with its installation).
LABELED = (
    Path(__file__).resolve().parents[2] / "examples" / "deliveries" / "issues-labeled-reqdrive.json"
)
LABELED_NAME = "reqdrive"  # the label that sample adds; the trigger label below
SECRET = "e2e-stack-secret"
# Generous bounds so a busy machine only slows a test down; none of them is asserted on.
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 90.0


@dataclass
class Up:
    """A running `reqdrive up` and what it printed."""

    process: subprocess.Popen[str]
    port: int
    lines: list[str] = field(default_factory=list)
    stderr: str = ""

    def pids(self) -> dict[str, int]:
        found = {}
        for line in self.lines:
            words = line.split()
            if len(words) >= 3 and words[1] == "pid":
                found[words[0]] = int(words[2])
        return found

    def output(self) -> str:
        return "".join(self.lines)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GITHUB_", "REQDRIVE_")) and k not in ("REDIS_URL", "PORT")
    }
    return {**env, **extra}


@contextmanager
def running_up(cwd: Path, env: dict[str, str], *options: str) -> Iterator[Up]:
    """`reqdrive up` in its own session; on the way out it is stopped and its pipes closed."""
    port = free_port()
    # Its own session, so a test can send SIGINT to the whole group as a terminal's Ctrl-C does.
    with subprocess.Popen(
        [REQDRIVE, "up", "--port", str(port), *options],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        up = Up(process, port)
        assert process.stdout is not None and process.stderr is not None
        stdout, stderr = process.stdout, process.stderr
        reader = threading.Thread(target=lambda: up.lines.extend(iter(stdout.readline, "")))
        reader.start()
        try:
            yield up
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=STOP_TIMEOUT_S)
            reader.join()
            up.stderr = stderr.read()


def _wait_healthy(up: Up) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert up.process.poll() is None, f"reqdrive up exited early: {up.output()}"
        if _status(f"http://127.0.0.1:{up.port}/healthz") == 200 and "Webhook URL" in up.output():
            return
        time.sleep(0.2)
    pytest.fail(f"/healthz never answered 200: {up.output()}")


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - local test server
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def _stop(up: Up, how: str) -> int:
    if how == "ctrl-c":
        os.killpg(up.process.pid, signal.SIGINT)
    else:
        up.process.send_signal(signal.SIGTERM)
    return up.process.wait(timeout=STOP_TIMEOUT_S)  # the pids it printed are checked after


def _group_gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def stack_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # A short path: the embedded Redis socket must fit in a unix socket address (108 bytes).
    directory = tmp_path_factory.mktemp("up")
    (directory / ".env").write_text(
        f"GITHUB_WEBHOOK_SECRET={SECRET}\nREQDRIVE_TRIGGER_LABEL={LABELED_NAME}\n"
    )
    yield directory


def _reqdrive(
    *args: str, env: dict[str, str], cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run `reqdrive` to completion; its exit code and output, never an exception."""
    return subprocess.run(
        [REQDRIVE, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _replay(cwd: Path, port: int, event: str, payload: Path) -> subprocess.CompletedProcess[str]:
    url = f"http://127.0.0.1:{port}/webhook"
    # The secret comes from the .env file in cwd, as for `up`.
    return _reqdrive("replay", event, str(payload), "--url", url, env=_clean_env(), cwd=cwd)


def _wait_for_text(path: Path, text: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.2)
    pytest.fail(f"{text!r} never appeared in {path}")


def test_up_with_embedded_redis_serves_queues_and_stops_everything_on_ctrl_c(
    stack_dir: Path,
) -> None:
    with running_up(stack_dir, _clean_env()) as up:
        _wait_healthy(up)
        pids = up.pids()
        assert set(pids) == {"redis", "web", "worker"}
        assert (stack_dir / ".reqdrive" / "redis" / "redis.sock").exists()
        assert f"http://127.0.0.1:{up.port}/webhook" in up.output()

        replayed = _replay(stack_dir, up.port, "issues", LABELED)
        assert replayed.returncode == 0, replayed.stderr
        status, _, body = replayed.stdout.partition("\n")
        assert status == "202"
        # The worker took the job off the queue the web process put it on.
        job_id = json.loads(body)["job_ids"][0]
        _wait_for_text(stack_dir / ".reqdrive" / "logs" / "worker.log", job_id)
        # The web log is readable text with times and ids: one "job queued" line per job.
        web_log = stack_dir / ".reqdrive" / "logs" / "web.log"
        _wait_for_text(web_log, f"job_id={job_id}")
        [queued] = [line for line in web_log.read_text().splitlines() if "job queued" in line]
        assert queued[:2] == "20" and "INFO bot.web.intake: job queued delivery_id=" in queued

        # Its Redis asks for the password `up` handed the web process and the worker.
        socket_path = str(stack_dir / ".reqdrive" / "redis" / "redis.sock")
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(unix_socket_path=socket_path).ping()
        password = (stack_dir / ".reqdrive" / "redis" / "password").read_text().strip()

        code = _stop(up, "ctrl-c")

    assert code == 0, up.stderr
    assert _group_gone(pids["web"])  # the web server and its workers
    assert _group_gone(pids["worker"])  # the RQ worker, its scheduler and any work horse
    assert _process_gone(pids["redis"])
    files = sorted(stack_dir.glob(".reqdrive/*/*.log"))
    assert [f.name for f in files] == ["web.log", "worker.log", "redis.log"]
    logs = [up.output(), up.stderr, *(f.read_text() for f in files)]
    assert not any(password in text for text in logs)
    # No App id or key in this .env: up says what that means instead of starting silently.
    assert "warning: GITHUB_APP_ID and GITHUB_PRIVATE_KEY" in up.stderr


def test_a_second_up_in_the_same_folder_refuses_and_leaves_the_first_alone(
    stack_dir: Path,
) -> None:
    with running_up(stack_dir, _clean_env()) as up:
        _wait_healthy(up)
        socket_path = stack_dir / ".reqdrive" / "redis" / "redis.sock"
        second = _reqdrive("up", "--port", str(free_port()), env=_clean_env(), cwd=stack_dir)
        assert second.returncode == 2
        assert "reqdrive up is already running in this folder" in second.stderr
        assert f"pid {up.process.pid}" in second.stderr
        assert "Traceback" not in second.stderr
        # The first stack still has its Redis and still takes deliveries.
        assert socket_path.exists()
        replayed = _replay(stack_dir, up.port, "issues", LABELED)
        assert replayed.stdout.startswith("202"), replayed.stdout
        assert _stop(up, "sigterm") == 0
    # Stopped, it no longer holds the folder.
    assert (stack_dir / ".reqdrive" / "up.lock").read_text() == ""


def test_up_on_a_port_in_use_refuses_before_starting_anything(stack_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = _reqdrive("up", "--port", port, env=_clean_env(), cwd=stack_dir)
    assert result.returncode == 2
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert not (stack_dir / ".reqdrive" / "redis").exists()


def test_ctrl_c_lets_the_worker_shut_down_warm_before_redis_stops(stack_dir: Path) -> None:
    with running_up(stack_dir, _clean_env()) as up:
        _wait_healthy(up)
        worker_log = stack_dir / ".reqdrive" / "logs" / "worker.log"
        _wait_for_text(worker_log, "Listening on reqdrive")
        assert _stop(up, "ctrl-c") == 0
    log = worker_log.read_text()
    assert "warm shut down requested" in log
    assert "Traceback" not in log, log[-2000:]


def test_up_with_redis_url_starts_no_redis_and_stops_on_sigterm(
    stack_dir: Path, redis_url: str, redis_conn: redis.Redis
) -> None:
    with running_up(stack_dir, _clean_env(REDIS_URL=redis_url)) as up:
        _wait_healthy(up)
        pids = up.pids()
        assert set(pids) == {"web", "worker"}
        assert "REDIS_URL (not started here)" in up.output()
        assert not (stack_dir / ".reqdrive" / "redis").exists()
        # The worker registered itself on the Redis it was given.
        deadline = time.monotonic() + START_TIMEOUT_S
        while not redis_conn.keys("rq:worker:*"):
            assert time.monotonic() < deadline, "no RQ worker registered on REDIS_URL"
            time.sleep(0.2)

        code = _stop(up, "sigterm")

    assert code == 0, up.stderr
    assert _group_gone(pids["web"])
    assert _group_gone(pids["worker"])


def test_a_dead_child_stops_the_stack_and_is_named(stack_dir: Path, redis_url: str) -> None:
    with running_up(stack_dir, _clean_env(REDIS_URL=redis_url)) as up:
        _wait_healthy(up)
        pids = up.pids()
        os.killpg(pids["worker"], signal.SIGKILL)
        code = up.process.wait(timeout=STOP_TIMEOUT_S)

    assert code != 0
    assert "worker exited unexpectedly" in up.stderr
    assert _group_gone(pids["web"])


def test_up_refuses_a_redis_url_that_does_not_answer(stack_dir: Path) -> None:
    with closed_port() as redis_port:
        env = _clean_env(REDIS_URL=f"redis://127.0.0.1:{redis_port}/0")
        result = _reqdrive("up", "--port", str(free_port()), env=env, cwd=stack_dir)
    assert result.returncode != 0
    assert "the Redis at REDIS_URL does not answer" in result.stderr
    assert "unset REDIS_URL and `reqdrive up` starts an embedded Redis" in result.stderr
    assert "Traceback" not in result.stderr


def test_env_file_never_overrides_the_real_environment(stack_dir: Path, redis_url: str) -> None:
    # The .env says SECRET; the environment says otherwise, and the environment wins.
    env = _clean_env(REDIS_URL=redis_url, GITHUB_WEBHOOK_SECRET="from-env")
    with running_up(stack_dir, env) as up:
        _wait_healthy(up)
        replayed = _replay(stack_dir, up.port, "issues", LABELED)  # signs with the .env secret
    assert replayed.stdout.startswith("401"), replayed.stdout
