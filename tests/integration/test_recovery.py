"""Lost runs are noticed by their heartbeat, whose lifetime an operator may shorten."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from rq import Retry
from rq.job import JobStatus
from rq.registry import ScheduledJobRegistry, StartedJobRegistry

from bot.jobs import runtime
from bot.jobs.drive import AlreadyRunning, Monitor, run_lock
from bot.jobs.recovery import sweep
from bot.ops.settings import load_settings
from bot.stores.run_locks import CLAIM_KEY, LEGACY_LOCK_KEY, run_lock_key
from bot.stores.runs import HEARTBEAT_KEY, RunRecord
from tests.support.github_http import private_key_pem
from worker.model.state import Checkpoint, RunStatus


def _runtime(redis_conn: redis.Redis, redis_url: str, **settings: object) -> runtime.Runtime:
    values = {
        "github_webhook_secret": "test-secret",
        "github_app_id": 42,
        "github_private_key": private_key_pem(),
        "redis_url": redis_url,
        **settings,
    }
    return runtime.configure(load_settings(**values), redis_conn)


def _record(run_id: str = "issue-1-x") -> RunRecord:
    return RunRecord(
        run_id=run_id, repo="octo/shop", installation_id=1, source="ISSUE-1", text="Build it.",
        slug="issue-1-x", branch="reqdrive/issue-1-x", base_branch="main",
        clone_url="https://example.invalid/octo/shop.git",
    )  # fmt: skip


def _running(record: RunRecord) -> Checkpoint:
    return Checkpoint(
        run_id=record.run_id, requirement_source=record.source, branch=record.branch,
        base_ref="main", base_sha="0" * 40, head_sha="0" * 40, status=RunStatus.RUNNING,
    )  # fmt: skip


def test_a_shorter_heartbeat_lifetime_is_kept_alive_by_a_running_monitor(
    redis_conn: redis.Redis, redis_url: str
) -> None:
    rt = _runtime(redis_conn, redis_url, reqdrive_heartbeat_ttl_s=3)
    record = _record()
    monitor = Monitor(rt, record, threading.Event())
    monitor.start()
    try:
        time.sleep(5)  # longer than the heartbeat lives: only beats within it keep it
        assert rt.records.alive(record.run_id)
        assert 0 < redis_conn.ttl(HEARTBEAT_KEY.format(run_id=record.run_id)) <= 3
    finally:
        monitor.stopping.set()
        monitor.join()


def test_a_run_whose_short_heartbeat_lapsed_is_queued_for_resume(
    redis_conn: redis.Redis, redis_url: str
) -> None:
    rt = _runtime(redis_conn, redis_url, reqdrive_heartbeat_ttl_s=3)
    record = _record()
    rt.records.save(record)
    rt.checkpoints.save(_running(record))
    rt.records.beat(record.run_id)
    assert sweep(rt) == []  # alive

    redis_conn.delete(HEARTBEAT_KEY.format(run_id=record.run_id))  # as 3 s without a beat do

    assert sweep(rt) == [record.run_id]
    assert redis_conn.exists(CLAIM_KEY.format(run_id=record.run_id))
    [job] = rt.queue.get_jobs()
    assert job.func_name == "bot.jobs.resume_run"


def test_the_lost_workers_job_is_cancelled_so_rq_does_not_run_it_again(
    redis_conn: redis.Redis, redis_url: str
) -> None:
    rt = _runtime(redis_conn, redis_url)
    lost = rt.queue.enqueue("bot.jobs.run_requirement", retry=Retry(max=2, interval=60))
    done = rt.queue.enqueue("bot.jobs.run_requirement")
    lost.set_status(JobStatus.STARTED)  # as the killed worker left it
    done.set_status(JobStatus.FINISHED)
    for run_id, job in (("issue-1-x", lost), ("issue-2-y", done)):
        record = _record(run_id)
        record.job_id = job.id
        rt.records.save(record)
        rt.checkpoints.save(_running(record))
        rt.records.beat(run_id)
        redis_conn.delete(HEARTBEAT_KEY.format(run_id=run_id))

    started = StartedJobRegistry(queue=rt.queue)
    redis_conn.zadd(started.key, {f"{lost.id}:lost-execution": 1})  # its worker's entry, expired

    assert sorted(sweep(rt)) == ["issue-1-x", "issue-2-y"]
    started.cleanup()  # rq's maintenance, minutes later in a worker

    assert lost.get_status() == JobStatus.CANCELED
    # rq leaves ScheduledJobRegistry's own __init__ (*args, **kwargs) unannotated.
    scheduled = ScheduledJobRegistry(queue=rt.queue)  # type: ignore[no-untyped-call]
    assert scheduled.get_job_ids() == []  # no retry of it
    assert lost.id not in rt.queue.get_job_ids()
    assert done.get_status() == JobStatus.FINISHED


def test_one_job_per_requirement_holds_the_run_lock_and_a_legacy_lock_is_respected(
    redis_conn: redis.Redis, redis_url: str
) -> None:
    rt = _runtime(redis_conn, redis_url)
    record = _record()
    with run_lock(rt, record):
        assert redis_conn.exists(run_lock_key(record.repo, record.source))
        with pytest.raises(AlreadyRunning), run_lock(rt, _record("issue-1-other-text")):
            pass
    assert not redis_conn.exists(run_lock_key(record.repo, record.source))  # released

    # A run of the version before RedisRunLock, during a rolling deploy, keeps its requirement.
    redis_conn.set(LEGACY_LOCK_KEY.format(repo="octo/shop", source="ISSUE-1"), "old-run", ex=45)
    with pytest.raises(AlreadyRunning), run_lock(rt, record):
        pass


def test_the_monitor_renews_the_lock_with_the_heartbeat_and_it_lapses_no_later(
    redis_conn: redis.Redis, redis_url: str
) -> None:
    rt = _runtime(redis_conn, redis_url, reqdrive_heartbeat_ttl_s=3)
    record = _record()
    key = run_lock_key(record.repo, record.source)
    with run_lock(rt, record) as lock:
        monitor = Monitor(rt, record, threading.Event(), lock)
        monitor.start()
        time.sleep(5)  # longer than both live: only the monitor's renewals keep them
        assert redis_conn.exists(key) and rt.records.alive(record.run_id)
        monitor.stopping.set()  # as a killed worker's monitor stops, without releasing
        monitor.join()
        # Both read in one transaction: read one after the other, the second had a
        # millisecond less to live than it had when the first was read.
        pipe = redis_conn.pipeline(transaction=True)
        pipe.pttl(key)
        pipe.pttl(HEARTBEAT_KEY.format(run_id=record.run_id))
        lock_ms, heartbeat_ms = pipe.execute()
        # When the sweeper finds the heartbeat gone, the resume it queues finds the lock free.
        assert 0 < lock_ms <= heartbeat_ms <= 3000
