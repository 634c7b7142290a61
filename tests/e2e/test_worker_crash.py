"""A worker killed mid-run (SIGKILL): another real `reqdrive worker` resumes the run in time."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis
from rq import Queue, Retry
from rq.job import JobStatus
from rq.registry import FailedJobRegistry
from rq.serializers import JSONSerializer

from bot.requests import JobKind, RunRequest
from bot.web.enqueue import RUN_RETRY
from tests.integration.test_pipeline import Project, git, implement, prd, project_factory
from tests.support.github_http import FakeGitHub, private_key_pem, served_fake_github

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


@dataclass
class CrashScene:
    """A repository with an issue on the fake GitHub, a two-story scenario whose US-002 hangs
    on its first call (until its worker dies), and the workers' documented environment."""

    project: Project
    issue: int
    env: dict[str, str]
    request: RunRequest


def crash_scene(tmp_path: Path, gh: FakeGitHub, redis_url: str, **env: str) -> CrashScene:
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
    worker_env = {
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
        # The scripted agent lives in this checkout and reads a scenario from tmp_path; these
        # tests are about recovery (containment is tests/integration/test_pipeline_sandbox.py).
        "REQDRIVE_SANDBOX": "off",
        **env,
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
    return CrashScene(project, issue, worker_env, request)


def test_a_killed_workers_run_is_resumed_by_another_worker_within_two_minutes(
    tmp_path: Path, served: FakeGitHub, redis_conn: redis.Redis, redis_url: str
) -> None:
    gh = served
    scene = crash_scene(tmp_path, gh, redis_url)
    project, issue, env = scene.project, scene.issue, scene.env
    queue = Queue(QUEUE, connection=redis_conn, serializer=JSONSerializer)
    queue.enqueue(
        "bot.jobs.run_requirement", kwargs=scene.request.model_dump(mode="json"), job_timeout=3600
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
    # US-001 once; US-002's tests were frozen before the crash: only its code is redone.
    assert project.calls() == [
        "plan 1",
        *("US-001 1 tests", "US-001 1"),
        *("US-002 1 tests", "US-002 1", "US-002 1"),
    ]
    [pull] = gh.pulls_of(REPO)
    log = git(project.remote, "log", "--format=%s", f"main..{pull['head']['ref']}").splitlines()
    assert log == [
        "feat: [US-002] - Feature 2",
        "test: [US-002] - Feature 2",
        "feat: [US-001] - Feature 1",
        "test: [US-001] - Feature 1",
    ]
    [comment] = [c for c in gh.comments_on(REPO, issue) if "reqdrive:progress" in c["body"]]
    assert "another worker resumed the run" in comment["body"]
    assert pull["draft"] is False
    assert all(r["status"] == "completed" for r in gh.check_runs_of(REPO))
    head = git(project.remote, "rev-parse", pull["head"]["ref"])
    assert [r["conclusion"] for r in gh.check_runs_of(REPO) if r["head_sha"] == head] == ["success"]


def kill_work_horse(worker: subprocess.Popen[bytes]) -> None:
    """SIGKILL the job's work horse and what it started, the worker itself surviving (the OOM
    killer's choice): rq's worker sees the horse die and retries the job at once."""
    # rq's horse calls setpgrp(); the worker's other child, its scheduler, does not.
    [horse] = [p for p in psutil.Process(worker.pid).children() if os.getpgid(p.pid) == p.pid]
    tree = [horse, *horse.children(recursive=True)]
    for proc in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)


def test_rqs_retry_of_a_killed_run_leaves_it_to_the_sweeper_one_resume_no_reply(
    tmp_path: Path, served: FakeGitHub, redis_conn: redis.Redis, redis_url: str
) -> None:
    gh = served
    scene = crash_scene(
        tmp_path,
        gh,
        redis_url,
        # The dead horse's heartbeat and lock outlive RQ's retry below by seconds, as the
        # defaults (45 s) outlive RUN_RETRY's first minute when the horse dies within one.
        REQDRIVE_HEARTBEAT_TTL_S="6",
        REQDRIVE_RECOVERY_SWEEP_S="2",
    )
    project, issue, env, request = scene.project, scene.issue, scene.env, scene.request
    queue = Queue(QUEUE, connection=redis_conn, serializer=JSONSerializer)
    # RUN_RETRY's attempts, with a 1 s pause instead of its minute.
    job = queue.enqueue(
        "bot.jobs.run_requirement",
        kwargs=request.model_dump(mode="json"),
        job_timeout=3600,
        retry=Retry(max=RUN_RETRY.max, interval=1),
    )
    worker = start_worker(env, tmp_path / "worker.log")
    try:
        wait_for(lambda: "US-002 1" in project.calls(), 120, "US-002's agent started")
        kill_work_horse(worker)

        def finished() -> bool:
            bodies = [c["body"] for c in gh.comments_on(REPO, issue)]
            return any("✅ Done" in b for b in bodies)

        took = wait_for(finished, 180, "the run finished after the sweeper's resume")
        wait_for(lambda: job.get_status() == JobStatus.FINISHED, 30, "the retried job ended")
    finally:
        stop(worker)

    assert took < TAKEOVER_LIMIT_S
    assert project.calls() == [
        "plan 1",
        *("US-001 1 tests", "US-001 1"),
        *("US-002 1 tests", "US-002 1", "US-002 1"),  # one resume, its frozen tests kept
    ]
    assert job.return_value() == {
        "status": "left to the recovery sweeper",
        "run_id": job.get_meta()["run_id"],
    }
    stored = queue.fetch_job(job.id)
    assert stored is not None
    assert stored.retries_left == RUN_RETRY.max - 1  # RQ did retry it once: that ran nothing
    assert FailedJobRegistry(queue=queue).get_job_ids() == []
    comments = [c["body"] for c in gh.comments_on(REPO, issue)]
    assert not [b for b in comments if "reqdrive:reply" in b]  # no "already running" reply
    [progress] = [b for b in comments if "reqdrive:progress" in b]
    assert "another worker resumed the run" in progress
    [pull] = gh.pulls_of(REPO)
    log = git(project.remote, "log", "--format=%s", f"main..{pull['head']['ref']}").splitlines()
    assert log == [
        "feat: [US-002] - Feature 2",
        "test: [US-002] - Feature 2",
        "feat: [US-001] - Feature 1",
        "test: [US-001] - Feature 1",
    ]
