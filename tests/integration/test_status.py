"""`reqdrive status` against a real Redis with real RQ workers, and on a work dir's runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Queue, Retry
from rq.serializers import JSONSerializer

from bot.cli import main
from bot.ops.embedded_redis import EmbeddedRedis
from tests.support.processes import running

ROOT = Path(__file__).resolve().parents[2]
QUEUE = "reqdrive-status-test"


def wait_for(condition: Any, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.fixture
def worker(redis_url: str, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real `rq worker` process on the test queue (the forking worker, as in production)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = (tmp_path / "worker.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "rq.cli", "worker", "--url", redis_url, "--serializer",
         "rq.serializers.JSONSerializer", "--name", "status-worker-1", QUEUE],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    yield process
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    log.close()


def status(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["status", *args])
    return code, capsys.readouterr().out


def test_status_shows_queued_running_and_failed_jobs_per_repository(
    redis_url: str,
    redis_conn: redis.Redis,
    worker: subprocess.Popen[bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    queue = Queue(QUEUE, connection=redis_conn, serializer=JSONSerializer)
    release = tmp_path / "release"
    failing = queue.enqueue("tests.support.held_jobs.fail", kwargs={"repo": "octo/app"})
    wait_for(lambda: failing.get_status(refresh=True) == "failed")
    # Failed once, to run again in ten minutes: shown, with the error, not left out.
    retrying = queue.enqueue(
        "tests.support.held_jobs.fail",
        kwargs={"repo": "octo/app"},
        retry=Retry(max=1, interval=600),
    )
    wait_for(lambda: retrying.get_status(refresh=True) == "scheduled")
    held = queue.enqueue(
        "tests.support.held_jobs.hold",
        kwargs={"release_file": str(release), "repo": "octo/app", "story": "US-002"},
    )
    wait_for(lambda: held.get_status(refresh=True) == "started" and held.get_meta().get("story"))
    waiting = queue.enqueue(
        "tests.support.held_jobs.hold",
        kwargs={"release_file": str(release), "repo": "octo/other", "story": "US-001"},
    )
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.chdir(tmp_path)  # not a checkout: the queue alone

    code, out = status(capsys, "--queue", QUEUE)
    assert code == 0
    lines = out.splitlines()
    assert f"queue {QUEUE}:" in lines
    assert "  octo/app: 0 queued, 1 retrying, 1 running, 1 failed, 0 finished" in lines
    running_line = next(line for line in lines if "running " in line and held.id in line)
    assert "docs/requirements/REQ-001-export.md" in running_line
    assert "story US-002 for 2m " in running_line and "on status-worker-1" in running_line
    failed_line = next(line for line in lines if failing.id in line)
    assert failed_line.strip().startswith("failed") and "could not be started" in failed_line
    assert "  octo/other: 1 queued, 0 retrying, 0 running, 0 failed, 0 finished" in lines
    retrying_line = next(line for line in lines if retrying.id in line)
    assert retrying_line.strip().startswith("retrying")
    assert any(line.strip().startswith("queued") and waiting.id in line for line in lines)

    code, out = status(capsys, "--queue", QUEUE, "--json")
    jobs = {j["job_id"]: j for j in json.loads(out)["queue"]["repositories"]["octo/app"]}
    assert jobs[held.id]["state"] == "running" and jobs[held.id]["worker"] == "status-worker-1"
    assert jobs[held.id]["story"] == "US-002" and jobs[held.id]["story_seconds"] >= 125
    assert jobs[failing.id]["state"] == "failed"

    release.write_text("go")
    wait_for(lambda: waiting.get_status(refresh=True) == "finished")
    code, out = status(capsys, "--queue", QUEUE)
    assert "  octo/app: 0 queued, 1 retrying, 0 running, 1 failed, 1 finished" in out.splitlines()
    assert "  octo/other: 0 queued, 0 retrying, 0 running, 0 failed, 1 finished" in out.splitlines()


def test_status_beside_reqdrive_up_shows_its_queue_without_redis_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `up` keeps its Redis on a socket in the work dir; the user of `up` never set REDIS_URL.
    work = tmp_path / "work"
    embedded = EmbeddedRedis(work / "redis", append_only=False)
    conn = redis.Redis.from_url(embedded.start())
    try:
        queue = Queue("reqdrive", connection=conn, serializer=JSONSerializer)
        job = queue.enqueue("tests.support.held_jobs.fail", kwargs={"repo": "octo/app"})
        monkeypatch.delenv("REDIS_URL", raising=False)
        monkeypatch.delenv("REQDRIVE_QUEUE", raising=False)
        code, out = status(capsys, "--work-dir", str(work))
        assert code == 0
        assert "queue reqdrive:" in out.splitlines()
        assert any(
            line.strip().startswith("queued") and job.id in line for line in out.splitlines()
        )
    finally:
        conn.close()
        embedded.stop()
    # Stopped, its socket is gone and status shows the runs alone, as before `up` ran.
    code, out = status(capsys, "--work-dir", str(work))
    assert code == 0 and "queue" not in out


def test_status_says_when_redis_does_not_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://:hunter2secret@127.0.0.1:1/0")
    monkeypatch.chdir(tmp_path)
    assert main(["status"]) == 8
    err = capsys.readouterr().err
    assert "the Redis at REDIS_URL does not answer" in err and "hunter2secret" not in err


def test_status_names_a_redis_url_without_a_scheme_instead_of_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REDIS_URL", "hunter2secret@127.0.0.1:6379")
    monkeypatch.chdir(tmp_path)
    assert main(["status"]) == 8
    err = capsys.readouterr().err
    assert "REDIS_URL must start with redis://" in err and "Traceback" not in err
    assert "hunter2secret" not in err


def test_status_outside_a_checkout_without_redis_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("REQDRIVE_WORK_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["status"]) == 8
    assert "pass --work-dir" in capsys.readouterr().err


def checkpoint(run_id: str, status: str, stories: list[dict[str, Any]]) -> str:
    return json.dumps(
        {
            "run_id": run_id, "requirement_source": "docs/requirements/REQ-001.md",
            "branch": f"reqdrive/{run_id}", "base_ref": "main", "base_sha": "b" * 40,
            "head_sha": "c" * 40, "status": status, "step": "implement", "cost_usd": 1.5,
            "stories": stories,
        }
    )  # fmt: skip


def story(story_id: str, state: str, attempts: int) -> dict[str, Any]:
    attempt = {"iteration": 1, "attempt": 1, "outcome": "gates failed"}
    return {
        "id": story_id, "title": f"Title {story_id}", "priority": 1,
        "acceptance_criteria": ["x"], "state": state, "attempts": [attempt] * attempts,
    }  # fmt: skip


def test_local_status_shows_each_run_and_whether_a_process_holds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "work/runs"
    for run_id in ("live", "orphan"):
        folder = runs / run_id
        folder.mkdir(parents=True)
        stories = [story("US-001", "passed", 1), story("US-002", "pending", 2)]
        (folder / "checkpoint.json").write_text(checkpoint(run_id, "running", stories))
    # A real process holding the live run's lock, as `reqdrive run` does.
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys, time; f = open(sys.argv[1], 'a+'); "
         "fcntl.flock(f, fcntl.LOCK_EX); f.write(str(os.getpid())); f.flush(); "
         "print('locked', flush=True); time.sleep(120)", str(runs / "live/.lock")],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        (runs / "orphan/.lock").write_text(f"{holder.pid}\n")  # a pid that holds another file
        monkeypatch.delenv("REDIS_URL", raising=False)
        code, out = status(capsys, "--work-dir", str(tmp_path / "work"))
        assert code == 0
        assert (
            f"  live: running (implement, held by pid {holder.pid}); 1/2 stories passed, "
            "3 attempts, $1.50" in out.splitlines()
        )
        assert "  orphan: stopped (implement); 1/2 stories passed, 3 attempts, $1.50" in out
        code, out = status(capsys, "live", "--work-dir", str(tmp_path / "work"))
        assert "    US-002 pending (2 attempts) Title US-002" in out.splitlines()
        data = json.loads(status(capsys, "--work-dir", str(tmp_path / "work"), "--json")[1])
        assert {r["run_id"]: r["held_by"] for r in data["runs"]} == {
            "live": holder.pid,
            "orphan": None,
        }
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    assert running(holder.pid) is False


@pytest.mark.parametrize(("run_id", "code", "message"), [
    ("../../etc", 8, "run id '../../etc' is not valid"),
    ("nope", 8, "no run nope in"),
])  # fmt: skip
def test_status_and_logs_of_an_unknown_or_invalid_run_name_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], run_id: str, code: int, message: str
) -> None:
    (tmp_path / "work/runs/demo").mkdir(parents=True)
    for command in ("status", "logs"):
        assert main([command, run_id, "--work-dir", str(tmp_path / "work")]) == code
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
    assert "(runs: demo)" in err or "not valid" in err


def test_logs_prints_progress_and_the_current_agent_call_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "work/runs/demo"
    folder.mkdir(parents=True)
    (folder / "progress.txt").write_text("plan: 2 stories US-001, US-002\n")
    (folder / "iteration-1.log").write_text("old call\n")
    (folder / "iteration-2.log").write_text("agent says ghs_0123456789abcdefghij0123456789abcdef\n")
    (folder / "iteration-2.tests.log").write_text("a gate's output\n")
    os.utime(folder / "iteration-1.log", (1, 1))
    assert main(["logs", "demo", "--work-dir", str(tmp_path / "work")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "plan: 2 stories US-001, US-002"
    assert "--- iteration-2.log (the current agent call)" in out
    assert "ghs_0123456789" not in out and "[REDACTED]" in out
    assert "old call" not in out and "a gate's output" not in out


def test_logs_follow_prints_what_the_run_adds_until_its_process_ends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "work/runs/demo"
    folder.mkdir(parents=True)
    (folder / "progress.txt").write_text("first line\n")
    writer = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys, time; d = sys.argv[1]; f = open(d + '/.lock', 'a+'); "
         "fcntl.flock(f, fcntl.LOCK_EX); f.write(str(os.getpid())); f.flush(); time.sleep(1.5); "
         "open(d + '/progress.txt', 'a').write('second line\\n'); time.sleep(1.5)", str(folder)],
    )  # fmt: skip
    try:
        wait_for(lambda: (folder / ".lock").read_text().strip() if (folder / ".lock").exists()
                 else False)  # fmt: skip
        assert main(["logs", "demo", "--follow", "--work-dir", str(tmp_path / "work")]) == 0
    finally:
        writer.wait(timeout=30)
    out = capsys.readouterr().out.splitlines()
    assert out == ["first line", "second line"]


def test_local_status_says_ready_draft_cancelled_or_failed_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "work/runs"
    ends = {
        "good": ("finished", "all stories passed", {"ready": True, "draft_reason": None}),
        "half": (
            "finished",
            "no story left to try",
            {"ready": False, "draft_reason": "1 of 2 stories did not pass: US-002 (failed)"},
        ),
        "stopped": ("finished", "cancelled", {"ready": False, "draft_reason": "cancelled"}),
        "broken": ("failed", None, None),
    }
    for run_id, (status_, stop, summary) in ends.items():
        folder = runs / run_id
        folder.mkdir(parents=True)
        data = json.loads(checkpoint(run_id, status_, [story("US-001", "passed", 1)]))
        data.update(stop_reason=stop, error="git push was refused" if stop is None else None)
        (folder / "checkpoint.json").write_text(json.dumps(data))
        if summary is not None:
            (folder / "verification-summary.json").write_text(json.dumps(summary))
    monkeypatch.delenv("REDIS_URL", raising=False)

    code, out = status(capsys, "--work-dir", str(tmp_path / "work"))
    lines = out.splitlines()

    assert code == 0
    assert "  good: ready; 1/1 stories passed, 1 attempt, $1.50" in lines
    assert "  half: draft; 1/1 stories passed, 1 attempt, $1.50" in lines
    assert "    why: 1 of 2 stories did not pass: US-002 (failed)" in lines
    assert "  stopped: cancelled; 1/1 stories passed, 1 attempt, $1.50" in lines
    assert "    why: stopped by request; what passed is on reqdrive/stopped" in lines
    assert "  broken: failed (implement); 1/1 stories passed, 1 attempt, $1.50" in lines
    assert "    why: git push was refused" in lines
    assert not any("finished" in line for line in lines)
