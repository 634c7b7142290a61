"""A job that fails on purpose under a real `reqdrive worker`: why, in `reqdrive status` and in
one log line per attempt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from rq import Queue, Retry
from rq.serializers import JSONSerializer

from bot.cli import main
from tests.integration.test_status import wait_for

ROOT = Path(__file__).resolve().parents[2]
QUEUE = "reqdrive-job-errors-test"
IDENTITY = "the worker needs the App's identity"


@pytest.fixture
def worker_log(redis_url: str, tmp_path: Path) -> Iterator[Path]:
    """`reqdrive worker` as deployed without the App's identity (a warning, then every job
    fails); its text log in a file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "REQDRIVE_"))}
    env |= {
        "PYTHONPATH": str(ROOT),
        "REDIS_URL": redis_url,
        "GITHUB_WEBHOOK_SECRET": "s",
        "REQDRIVE_QUEUE": QUEUE,
        "REQDRIVE_SANDBOX": "off",
        "REQDRIVE_LOG_FORMAT": "text",
        "REQDRIVE_WORK_DIR": str(tmp_path / "work"),
    }
    path = tmp_path / "worker.log"
    with path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "worker"],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield path
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def retried_twice(queue: Queue, job_id: str) -> bool:
    job = queue.fetch_job(job_id)
    return job is not None and job.get_status() == "scheduled" and job.retries_left == 0


def test_a_retrying_job_says_why_and_its_expected_error_is_one_log_line_per_attempt(
    redis_url: str,
    redis_conn: redis.Redis,
    worker_log: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    queue = Queue(QUEUE, connection=redis_conn, serializer=JSONSerializer)
    request = {
        "kind": "run",
        "delivery_id": "d-1",
        "repo": "octo/app",
        "installation_id": 7,
        "sender": "octocat",
        "requirement": "docs/requirements/REQ-001-export.md",
    }
    # Retried once a second later, then again in ten minutes: two attempts, still retrying.
    job = queue.enqueue(
        "bot.jobs.run_requirement", kwargs=request, retry=Retry(max=2, interval=[1, 600])
    )
    wait_for(lambda: retried_twice(queue, job.id))

    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.chdir(worker_log.parent)  # not a checkout: the queue alone
    assert main(["status", "--queue", QUEUE]) == 0
    lines = capsys.readouterr().out.splitlines()
    retrying = next(line for line in lines if job.id in line)
    assert retrying.strip().startswith("retrying")
    assert f"ConfigurationError: {IDENTITY}: set GITHUB_APP_ID" in retrying

    assert main(["status", "--queue", QUEUE, "--json"]) == 0
    [shown] = json.loads(capsys.readouterr().out)["queue"]["repositories"]["octo/app"]
    assert shown["state"] == "retrying" and IDENTITY in shown["error"]

    log = worker_log.read_text()
    assert "Traceback" not in log
    failures = [line for line in log.splitlines() if IDENTITY in line]
    assert len(failures) == 2, log  # one line for each attempt
    assert all("job stopped by an error it raises on purpose" in line for line in failures)
    assert all(f"job_id={job.id}" in line for line in failures)
