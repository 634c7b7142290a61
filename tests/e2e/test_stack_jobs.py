"""The jobs a real `reqdrive worker` runs: only reqdrive's, and a running one stops with `up`."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from rq import Queue
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from bot.requests import JobKind, RunRequest
from tests.e2e.test_stack import (
    SECRET,
    START_TIMEOUT_S,
    _clean_env,
    _group_gone,
    _process_gone,
    _reqdrive,
    _stop,
    _wait_healthy,
    running_up,
    stack_dir,  # noqa: F401 - a fixture
)
from tests.e2e.test_worker_crash import QUEUE, crash_scene
from tests.integration.test_pipeline import Project
from tests.support.github_http import FakeGitHub, private_key_pem, served_fake_github

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def served() -> Iterator[FakeGitHub]:
    with served_fake_github() as fake:
        yield fake


def test_worker_refuses_a_queued_os_system_and_runs_the_next_reqdrive_job(
    tmp_path: Path, redis_url: str, redis_conn: redis.Redis
) -> None:
    # What an agent that reached Redis would queue: a shell command, as the worker's user.
    marker = tmp_path / "owned"
    queue = Queue("reqdrive", connection=redis_conn, serializer=JSONSerializer)
    attack = queue.enqueue("os.system", f"touch {marker}")
    # A real reqdrive job that needs no GitHub: the App was uninstalled.
    uninstall = RunRequest(
        kind=JobKind.UNINSTALL, delivery_id="d-1", repo="octo/app", installation_id=7, sender="x"
    )
    real = queue.enqueue("bot.jobs.drop_installation", kwargs=uninstall.model_dump(mode="json"))
    env = _clean_env(
        REDIS_URL=redis_url,
        GITHUB_WEBHOOK_SECRET=SECRET,
        GITHUB_APP_ID="42",
        GITHUB_PRIVATE_KEY=private_key_pem(),
    )

    result = _reqdrive("worker", "--burst", env=env, timeout=120)

    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    attack.refresh()  # type: ignore[no-untyped-call]  # rq leaves refresh unannotated
    assert attack.get_status() == JobStatus.FAILED
    latest = attack.latest_result()
    assert latest is not None and "is not one of reqdrive's jobs" in str(latest.exc_string)
    refused = [line for line in result.stderr.splitlines() if "job refused" in line]
    assert len(refused) == 1 and attack.id in refused[0] and "'os.system'" in refused[0]
    real.refresh()  # type: ignore[no-untyped-call]
    assert real.get_status() == JobStatus.FINISHED
    returned = real.return_value()
    assert returned is not None and returned["status"] == "dropped"


def _start_long_run(
    tmp_path: Path, gh: FakeGitHub, redis_url: str, redis_conn: redis.Redis
) -> tuple[dict[str, str], Project, Job]:
    """A run whose second story's agent hangs (600 s), and the stack's environment for it."""
    scene = crash_scene(tmp_path, gh, redis_url)
    queue = Queue(QUEUE, connection=redis_conn, serializer=JSONSerializer)
    job = queue.enqueue(
        "bot.jobs.run_requirement", kwargs=scene.request.model_dump(mode="json"), job_timeout=7200
    )
    return scene.env, scene.project, job


def _agent_pid(project: Project) -> int:
    """The hanging agent's pid, from the scripted agent's own call log, once it started."""
    deadline = time.monotonic() + 3 * START_TIMEOUT_S
    while time.monotonic() < deadline:
        log = project.tmp / "calls.log"
        for line in log.read_text().splitlines() if log.exists() else []:
            if line.startswith("US-002 1 pid="):
                return int(line.removeprefix("US-002 1 pid=").split()[0])
        time.sleep(0.2)
    pytest.fail(f"US-002's agent never started: {project.calls()}")


def test_a_running_job_is_stopped_when_its_grace_runs_out(
    stack_dir: Path,  # noqa: F811
    tmp_path: Path,
    served: FakeGitHub,
    redis_url: str,
    redis_conn: redis.Redis,
) -> None:
    env, project, job = _start_long_run(tmp_path, served, redis_url, redis_conn)
    with running_up(stack_dir, env, "--grace", "1") as up:
        _wait_healthy(up)
        pids = up.pids()
        agent = _agent_pid(project)
        code = _stop(up, "sigterm")

    assert code == 0, up.stderr
    assert _group_gone(pids["worker"])
    assert _process_gone(agent)  # the agent's own process group is gone too
    assert job.get_status(refresh=True) != JobStatus.FINISHED


def test_a_second_ctrl_c_stops_a_running_job_at_once(
    stack_dir: Path,  # noqa: F811
    tmp_path: Path,
    served: FakeGitHub,
    redis_url: str,
    redis_conn: redis.Redis,
) -> None:
    env, project, _ = _start_long_run(tmp_path, served, redis_url, redis_conn)
    # A grace far beyond the test's patience: only the second Ctrl-C can end this in time.
    with running_up(stack_dir, env, "--grace", "86400") as up:
        _wait_healthy(up)
        pids = up.pids()
        agent = _agent_pid(project)
        os.killpg(up.process.pid, signal.SIGINT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while "reqdrive up: stopping" not in up.output():
            assert time.monotonic() < deadline, "up never started stopping"
            time.sleep(0.2)
        code = _stop(up, "ctrl-c")

    assert code == 0, up.stderr
    assert _group_gone(pids["worker"])
    assert _process_gone(agent)
    worker_log = Path(env["REQDRIVE_WORK_DIR"]) / "logs" / "worker.log"  # the run's work dir
    assert "cold shut down" in worker_log.read_text()
