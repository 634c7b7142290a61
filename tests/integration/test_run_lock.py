"""One run per repository and requirement across machines: a Redis lock that lapses when its
holder dies."""

from __future__ import annotations

import io
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest
import redis

from bot.stores.run_locks import RedisRunLock, run_lock_key
from tests.integration.test_pipeline import MakeProject, implement, prd
from tests.integration.test_pipeline import make_project as make_project
from worker.exceptions import PreflightError
from worker.model.state import RunResult
from worker.report.console import ConsoleReporter
from worker.run.checkpoint_file import FileCheckpointStore
from worker.run.pipeline import Pipeline

KEY = run_lock_key("Octo/App", "docs/requirements/REQ-001-demo.md")


def wait_for(condition: Callable[[], object], seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_a_second_pipeline_for_the_same_requirement_is_refused_while_the_first_runs(
    make_project: MakeProject, redis_conn: redis.Redis
) -> None:
    project = make_project()
    scenario = project.scenario(
        {"plan": [{"sleep": 2, "prd": prd(1)}], "stories": {"US-001": [implement(1)]}}
    )
    results: list[RunResult] = []

    def pipeline(run_id: str) -> Pipeline:
        return Pipeline(
            project.spec(scenario, run_id=run_id),
            reporter=ConsoleReporter(io.StringIO()),
            checkpoints=FileCheckpointStore(project.work_dir / "runs"),
            lock=RedisRunLock(redis_conn, KEY),
        )

    first = threading.Thread(target=lambda: results.append(pipeline("run-1").run()))
    first.start()
    assert wait_for(lambda: redis_conn.exists(KEY))
    # Another worker (another run id, another machine): refused, nothing started.
    with pytest.raises(PreflightError, match="already being run by another worker"):
        pipeline("run-2").run()
    first.join()
    assert results and results[0].ready
    assert project.calls() == ["plan 1", "US-001 1 tests", "US-001 1"]
    assert not redis_conn.exists(KEY)  # released at the end


def test_a_live_holder_keeps_the_lock_past_its_timeout(redis_conn: redis.Redis) -> None:
    holder = RedisRunLock(redis_conn, KEY, timeout_s=1.0, renew_every_s=0.2)
    with holder.held():
        time.sleep(2.5)  # more than two timeouts: only renewals keep it
        with pytest.raises(PreflightError), RedisRunLock(redis_conn, KEY).held():
            pass
    with RedisRunLock(redis_conn, KEY).held():  # free once released
        pass


def test_the_lock_of_a_holder_that_died_frees_after_its_timeout(
    redis_url: str, redis_conn: redis.Redis
) -> None:
    code = (
        "import sys, os, signal, redis\n"
        "from bot.stores.run_locks import RedisRunLock\n"
        "lock = RedisRunLock(redis.Redis.from_url(sys.argv[1]), sys.argv[2], timeout_s=15.0)\n"
        "held = lock.held()\n"
        "held.__enter__()  # kept referenced: collecting it would release the lock\n"
        "print('held', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    dead = subprocess.run(
        [sys.executable, "-c", code, redis_url, KEY], capture_output=True, text=True, timeout=60
    )
    assert dead.stdout == "held\n" and dead.returncode == -9
    assert redis_conn.pttl(KEY) > 0  # still held: nobody released it, it only expires
    with pytest.raises(PreflightError), RedisRunLock(redis_conn, KEY).held():
        pass

    def free() -> bool:
        try:
            with RedisRunLock(redis_conn, KEY).held():
                return True
        except PreflightError:
            return False

    assert wait_for(free, seconds=60.0)
