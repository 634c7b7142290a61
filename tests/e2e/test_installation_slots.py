"""One installation flooding the queue never starves another: real `reqdrive worker` processes,
real Redis, real runs whose agents take their time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from rq import Queue
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from bot.requests import JobKind, RunRequest
from tests.e2e.test_worker_crash import kill_with_children, start_worker, stop, wait_for
from tests.integration.test_pipeline import Project, git, prd, project_factory
from tests.support.github_http import FakeGitHub, private_key_pem, served_fake_github

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

QUEUE = "reqdrive-slots"
BUSY, QUIET = ("octo/busy", 7), ("octo/quiet", 8)  # (repository, installation)


@pytest.fixture
def served() -> Iterator[FakeGitHub]:
    with served_fake_github() as fake:
        yield fake


def repository(tmp_path: Path, gh: FakeGitHub, repo: str, name: str) -> Project:
    (tmp_path / name).mkdir()
    project = project_factory(tmp_path / name)(
        config={"agent": {"runner": "command", "timeout": 600}}
    )
    gh.add_repo(repo, str(project.remote))
    gh.branch_heads[(repo, "main")] = git(project.remote, "rev-parse", "main")
    config = (tmp_path / name / "source/.github/reqdrive.yml").read_text()
    gh.set_file(repo, "main", ".github/reqdrive.yml", config)
    gh.set_role(repo, "alice", "write")
    return project


def enqueue(queue: Queue, gh: FakeGitHub, repo: str, installation: int) -> Job:
    issue = gh.add_issue(repo, f"Feature {time.time_ns()}", "Build feature one.")
    request = RunRequest(
        kind=JobKind.RUN,
        delivery_id=f"d-{issue}",
        repo=repo,
        installation_id=installation,
        sender="alice",
        requirement=f"ISSUE-{issue}",
        issue_number=issue,
    )
    return queue.enqueue(
        "bot.jobs.run_requirement", kwargs=request.model_dump(mode="json"), job_timeout=3600
    )


def test_a_flooding_installation_waits_for_its_slot_and_another_starts_on_the_free_worker(
    tmp_path: Path, served: FakeGitHub, redis_conn: redis.Redis, redis_url: str
) -> None:
    gh = served
    busy = repository(tmp_path, gh, BUSY[0], "busy")
    repository(tmp_path, gh, QUIET[0], "quiet")
    # Every story's agent (its tests call, the first) takes ten minutes: a run that starts
    # holds its worker.
    scenario = busy.scenario(
        {"plan": [{"prd": prd(1)}], "stories": {"US-001": [{"tests": {"sleep": 600}}]}}
    )
    env = {
        **os.environ,
        "GITHUB_WEBHOOK_SECRET": "test-secret",
        "GITHUB_APP_ID": "42",
        "GITHUB_PRIVATE_KEY": private_key_pem(),
        "GITHUB_API_URL": gh.api,
        "REDIS_URL": redis_url,
        "REQDRIVE_QUEUE": QUEUE,
        "REQDRIVE_WORK_DIR": str(tmp_path / "work"),
        "REQDRIVE_AGENT_COMMAND": busy.agent_command(scenario),
        "REQDRIVE_GITHUB_REQUEST_INTERVAL_S": "0",
        "REQDRIVE_GITHUB_WRITE_INTERVAL_S": "0",
        "REQDRIVE_SANDBOX": "off",  # the scripted agent reads its scenario from tmp_path
        # The default (2) would let the busy installation hold both workers; the operator
        # gave it one of its own.
        "REQDRIVE_INSTALLATIONS": f'{{"{BUSY[1]}": {{"maxConcurrentRuns": 1}}}}',
    }
    queue = Queue(QUEUE, connection=redis_conn, serializer=JSONSerializer)
    flood = [enqueue(queue, gh, *BUSY) for _ in range(3)]
    quiet = enqueue(queue, gh, *QUIET)
    workers = [start_worker(env, tmp_path / f"worker-{n}.log") for n in (1, 2)]
    try:
        # The busy installation's first run holds a worker; the second worker is free for the
        # quiet installation's run, whatever the busy one queued before it.
        wait_for(lambda: quiet.get_status(refresh=True) == JobStatus.STARTED, 90, "quiet started")
        wait_for(lambda: busy.calls().count("US-001 1 tests") == 2, 90, "both agents started")
        started = [job for job in flood if job.get_status(refresh=True) == JobStatus.STARTED]
        waiting = {job.get_status(refresh=True) for job in flood if job not in started}
        planned = busy.calls().count("plan 1")
        status = subprocess.run(
            [sys.executable, "-m", "bot.cli", "status", "--queue", QUEUE],
            env={**env, "REQDRIVE_WORK_DIR": ""},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        # What `reqdrive status` shows beside a run while it waits in rq's scheduled jobs
        # (once both workers are busy, the waiting runs sit in the queue proper instead).
        notes = {
            job.id: Job.fetch(job.id, connection=redis_conn, serializer=JSONSerializer).meta.get(
                "waiting"
            )
            for job in flood
        }
    finally:
        for worker in workers:
            kill_with_children(worker) if worker.poll() is None else None
            stop(worker)

    assert len(started) == 1  # one run of the busy installation at a time
    assert waiting <= {JobStatus.SCHEDULED, JobStatus.QUEUED}  # waiting, holding no worker
    assert planned == 2  # the busy installation's first run, and the quiet one's
    logs = "".join((tmp_path / f"worker-{n}.log").read_text() for n in (1, 2))
    assert "run waits: its installation has maxConcurrentRuns running" in logs
    # `reqdrive status` shows them queued, waiting for their slot, not failed and retrying.
    # (A waiting run a worker is checking at that instant is in neither list.)
    [line] = [x for x in status.stdout.splitlines() if x.startswith(f"  {BUSY[0]}: ")]
    assert "0 retrying, 1 running, 0 failed" in line, status.stdout + status.stderr
    waiting_note = "for its installation's runs below its maxConcurrentRuns"
    assert waiting_note in [notes[job.id] for job in flood if job not in started]
