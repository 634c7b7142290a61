"""A worker killed mid-run (SIGKILL): another real `reqdrive worker` resumes the run in time."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis
from rq import Queue
from rq.serializers import JSONSerializer

from tests.integration.test_pipeline import git, implement, prd, project_factory
from tests.support.github_http import FakeGitHub, private_key_pem, served_fake_github
from worker.requests import JobKind, RunRequest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = "octo/demo"
QUEUE = "reqdrive-crash"
TAKEOVER_LIMIT_S = 120.0


@pytest.fixture
def served() -> Iterator[FakeGitHub]:
    with served_fake_github() as fake:
        yield fake


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as handle:  # the worker keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "worker"],
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


def kill_with_children(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the worker, its work horse (rq gives it a process group of its own) and what
    they started, as when the machine is gone."""
    tree = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
    for proc in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


def wait_for(check: Any, timeout_s: float, what: str) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if check():
            return time.monotonic() - start
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout_s:g}s: {what}")


def test_a_killed_workers_run_is_resumed_by_another_worker_within_two_minutes(
    tmp_path: Path, served: FakeGitHub, redis_conn: redis.Redis, redis_url: str
) -> None:
    gh = served
    project = project_factory(tmp_path)(config={"agent": {"runner": "command", "timeout": 600}})
    source = tmp_path / "source"
    gh.add_repo(REPO, str(project.remote))
    gh.branch_heads[(REPO, "main")] = git(project.remote, "rev-parse", "main")
    gh.set_file(REPO, "main", ".github/reqdrive.yml", (source / ".github/reqdrive.yml").read_text())
    gh.set_role(REPO, "alice", "write")
    issue = gh.add_issue(REPO, "Features", "Build features one and two.")
    once = tmp_path / "slept"
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(2)}],
            # US-002's first agent call hangs until its worker is killed; the resumed call
            # finds the marker file and does its work at once.
            "stories": {
                "US-001": [implement(1)],
                "US-002": [{**implement(2), "sleep_once": 600, "once_file": str(once)}],
            },
        }
    )
    env = {
        **os.environ,
        "GITHUB_WEBHOOK_SECRET": "test-secret",
        "GITHUB_APP_ID": "42",
        "GITHUB_PRIVATE_KEY": private_key_pem(),
        "GITHUB_API_URL": gh.api,
        "REDIS_URL": redis_url,
        "REQDRIVE_QUEUE": QUEUE,
        "REQDRIVE_WORK_DIR": str(project.work_dir),
        "REQDRIVE_AGENT_COMMAND": project.agent_command(scenario),
        "REQDRIVE_GITHUB_REQUEST_INTERVAL_S": "0",
        "REQDRIVE_GITHUB_WRITE_INTERVAL_S": "0",
        # The scripted agent lives in this checkout and reads a scenario from tmp_path; this
        # test is about recovery (containment is tests/integration/test_pipeline_sandbox.py).
        "REQDRIVE_SANDBOX": "off",
    }
    request = RunRequest(
        kind=JobKind.RUN,
        delivery_id="d-1",
        repo=REPO,
        installation_id=7,
        sender="alice",
        requirement=f"ISSUE-{issue}",
        issue_number=issue,
    )
    queue = Queue(QUEUE, connection=redis_conn, serializer=JSONSerializer)
    queue.enqueue(
        "bot.jobs.run_requirement", kwargs=request.model_dump(mode="json"), job_timeout=3600
    )
    first = start_worker(env, tmp_path / "worker-1.log")
    second: subprocess.Popen[bytes] | None = None
    try:
        wait_for(lambda: "US-002 1" in project.calls(), 120, "US-002's agent started")
        second = start_worker(env, tmp_path / "worker-2.log")
        kill_with_children(first)

        def finished() -> bool:
            bodies = [c["body"] for c in gh.comments_on(REPO, issue)]
            return any("✅ Done" in b for b in bodies)

        took = wait_for(finished, 180, "the run finished on the second worker")
    finally:
        stop(first)
        if second is not None:
            stop(second)

    assert took < TAKEOVER_LIMIT_S
    assert project.calls() == ["plan 1", "US-001 1", "US-002 1", "US-002 1"]  # US-001 once
    [pull] = gh.pulls_of(REPO)
    log = git(project.remote, "log", "--format=%s", f"main..{pull['head']['ref']}").splitlines()
    assert log == ["feat: [US-002] - Feature 2", "feat: [US-001] - Feature 1"]
    [comment] = [c for c in gh.comments_on(REPO, issue) if "reqdrive:progress" in c["body"]]
    assert "another worker resumed the run" in comment["body"]
    assert pull["draft"] is False
    assert all(r["status"] == "completed" for r in gh.check_runs_of(REPO))
    head = git(project.remote, "rev-parse", pull["head"]["ref"])
    assert [r["conclusion"] for r in gh.check_runs_of(REPO) if r["head_sha"] == head] == ["success"]
