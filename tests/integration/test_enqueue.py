"""Enqueuer against a real Redis: dedupe, coalescing, re-runs, and what a failure leaves."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
from rq import Queue, Retry, SimpleWorker
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from rq.utils import utcparse

from bot.exceptions import QueueUnavailable
from bot.requests import JobKind, RunRequest
from bot.stores.deliveries import delivery_key, rerun_key
from bot.web.enqueue import Enqueuer, job_id_for
from tests.support.ports import closed_port
from tests.support.recording_jobs import JOB_LOG_KEY, RecordingJob

TIMEOUT_S = 6 * 3600


def request(kind: JobKind = JobKind.RUN, **fields: object) -> RunRequest:
    values: dict[str, object] = {
        "kind": kind,
        "delivery_id": "d-1",
        "repo": "octo/app",
        "sender": "octocat",
        "requirement": "docs/requirements/REQ-001-login.md",
    }
    values.update(fields)
    return RunRequest.model_validate(values)


@pytest.fixture
def enqueuer(redis_conn: redis.Redis) -> Enqueuer:
    return Enqueuer(redis_conn, "reqdrive", TIMEOUT_S)


def queue(conn: redis.Redis) -> Queue:
    return Queue("reqdrive", connection=conn, serializer=JSONSerializer)


def fetch(conn: redis.Redis, job_id: str) -> Job:
    return Job.fetch(job_id, connection=conn, serializer=JSONSerializer)


def test_a_queued_job_is_an_ordinary_rq_job(enqueuer: Enqueuer, redis_conn: redis.Redis) -> None:
    [queued] = enqueuer.accept("d-1", [request()]).jobs
    job = fetch(redis_conn, queued.id)
    assert job.func_name == "bot.jobs.run_requirement"
    assert job.kwargs == request().model_dump(mode="json")
    assert (job.timeout, job.retries_left, job.retry_intervals) == (TIMEOUT_S, 2, [60, 300])
    assert job.get_status() == JobStatus.QUEUED
    assert job.origin == "reqdrive"
    assert b"rq:queue:reqdrive" in redis_conn.smembers("rq:queues")  # `rq info` lists it
    SimpleWorker(
        [queue(redis_conn)],
        connection=redis_conn,
        serializer=JSONSerializer,
        job_class=RecordingJob,
    ).work(burst=True)
    assert fetch(redis_conn, queued.id).get_status() == JobStatus.FINISHED
    assert redis_conn.llen(JOB_LOG_KEY) == 1


@pytest.mark.parametrize(
    ("kind", "function", "requirement"),
    [
        (JobKind.RUN, "run_requirement", "docs/requirements/REQ-001-login.md"),
        (JobKind.CANCEL, "cancel_run", "ISSUE-9"),
        # Long values take msgpack's 2- and 4-byte length forms on their way to the script.
        (JobKind.PLAN, "plan_requirement", "docs/requirements/REQ-" + "x" * 300 + ".md"),
        (JobKind.RUN, "run_requirement", "docs/requirements/REQ-" + "ü" * 40_000 + ".md"),
    ],
)
def test_the_stored_job_is_exactly_what_rq_itself_would_store(
    enqueuer: Enqueuer, redis_conn: redis.Redis, kind: JobKind, function: str, requirement: str
) -> None:
    sent = request(kind, requirement=requirement, comment_id=5)
    [queued] = enqueuer.accept("d-1", [sent]).jobs
    stored = redis_conn.hgetall(Job.key_for(queued.id))
    # The job as rq's own Job.create would make it (an rq upgrade that changes the hash fails
    # here); only the timestamps are taken from what was stored.
    work = kind is not JobKind.CANCEL
    reference = Job.create(
        f"bot.jobs.{function}",
        kwargs=sent.model_dump(mode="json"),
        connection=redis_conn,
        serializer=JSONSerializer,
        id=queued.id,
        status=JobStatus.QUEUED,
        timeout=TIMEOUT_S if work else 600,
        retry=Retry(max=2, interval=[60, 300]) if work else Retry(max=2),
        result_ttl=7 * 24 * 3600,
        origin="reqdrive",
        meta={"kind": kind.value, "delivery_id": "d-1"},
        description=f"{kind.value} octo/app {requirement}",
    )
    created_at, enqueued_at = stored[b"created_at"], stored[b"enqueued_at"]
    assert isinstance(created_at, bytes) and isinstance(enqueued_at, bytes)  # not decoded
    reference.created_at = utcparse(created_at.decode())
    reference.enqueued_at = utcparse(enqueued_at.decode())
    redis_conn.hset("reference", mapping=reference.to_dict())
    assert stored == redis_conn.hgetall("reference")
    assert fetch(redis_conn, queued.id).kwargs["requirement"] == requirement


def test_fifty_concurrent_deliveries_of_one_requirement_queue_one_job(
    enqueuer: Enqueuer, redis_conn: redis.Redis
) -> None:
    def deliver(n: int) -> tuple[str, bool]:
        [job] = enqueuer.accept(f"d-{n}", [request(delivery_id=f"d-{n}")]).jobs
        return job.id, job.coalesced

    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(deliver, range(50)))
    assert len({job_id for job_id, _ in results}) == 1
    assert sorted(coalesced for _, coalesced in results) == [False] + [True] * 49
    assert queue(redis_conn).count == 1


def test_a_started_job_is_coalesced_into(enqueuer: Enqueuer, redis_conn: redis.Redis) -> None:
    [first] = enqueuer.accept("d-1", [request()]).jobs
    fetch(redis_conn, first.id).set_status(JobStatus.STARTED)
    redis_conn.lpop("rq:queue:reqdrive")  # a worker took it off the queue
    [again] = enqueuer.accept("d-2", [request(delivery_id="d-2")]).jobs
    assert again.coalesced
    assert queue(redis_conn).count == 0


def test_a_failed_job_is_queued_afresh_without_its_old_state(
    enqueuer: Enqueuer, redis_conn: redis.Redis
) -> None:
    [first] = enqueuer.accept("d-1", [request()]).jobs
    job = fetch(redis_conn, first.id)
    redis_conn.lpop("rq:queue:reqdrive")
    job.meta["step"] = "implement"
    job.save_meta()  # type: ignore[no-untyped-call]  # rq leaves save_meta unannotated
    job.set_status(JobStatus.FAILED)
    queue(redis_conn).failed_job_registry.add(job, ttl=3600, exc_string="boom")
    assert redis_conn.ttl(job.key) > 0
    [again] = enqueuer.accept("d-2", [request(delivery_id="d-2")]).jobs
    assert (again.id, again.coalesced) == (first.id, False)
    job = fetch(redis_conn, first.id)
    assert job.get_status() == JobStatus.QUEUED
    assert job.meta == {"kind": "run", "delivery_id": "d-2"}
    assert redis_conn.ttl(job.key) == -1  # the failed job's expiry would delete the new one
    assert first.id not in queue(redis_conn).failed_job_registry
    assert queue(redis_conn).job_ids == [first.id]


def test_a_delivery_is_not_marked_seen_when_its_job_could_not_be_queued(
    enqueuer: Enqueuer, redis_conn: redis.Redis
) -> None:
    other = request(requirement="docs/requirements/REQ-002.md")
    # Something else holds the second job's key: the script fails after checking the first.
    redis_conn.set(f"rq:job:{job_id_for(other)}", "not a job hash")
    with pytest.raises(QueueUnavailable):
        enqueuer.accept("d-1", [request(), other])
    assert redis_conn.exists(delivery_key("d-1")) == 0
    assert queue(redis_conn).count == 0
    assert redis_conn.exists(f"rq:job:{job_id_for(request())}") == 0  # nothing half-written
    redis_conn.delete(f"rq:job:{job_id_for(other)}")
    accepted = enqueuer.accept("d-1", [request(), other])  # GitHub's redelivery
    assert not accepted.duplicate
    assert queue(redis_conn).count == 2


def test_a_dead_redis_raises_queue_unavailable() -> None:
    with closed_port() as port, pytest.raises(QueueUnavailable):
        dead = redis.Redis(port=port, socket_connect_timeout=1)
        Enqueuer(dead, "reqdrive", TIMEOUT_S).accept("d-1", [request()])


def test_a_connection_redis_closed_does_not_refuse_the_next_delivery(
    enqueuer: Enqueuer, redis_conn: redis.Redis
) -> None:
    enqueuer.accept("d-1", [request()])
    # Redis dropped the enqueuer's idle connection (client timeout, restart). Only this
    # database's clients: other test sessions share the server.
    db = str(redis_conn.connection_pool.connection_kwargs["db"])
    me = str(redis_conn.client_id())
    theirs = [c["id"] for c in redis_conn.client_list() if c["db"] == db and c["id"] != me]
    assert theirs
    for client_id in theirs:
        redis_conn.client_kill_filter(_id=client_id)
    accepted = enqueuer.accept("d-2", [request(requirement="docs/requirements/REQ-002.md")])
    assert not accepted.duplicate
    assert queue(redis_conn).count == 2


def test_a_redis_that_forgot_the_script_gets_it_again(
    enqueuer: Enqueuer, redis_conn: redis.Redis
) -> None:
    enqueuer.accept("d-1", [request()])
    redis_conn.script_flush()  # a restarted Redis; other sessions' Script objects reload too
    accepted = enqueuer.accept("d-2", [request(requirement="docs/requirements/REQ-002.md")])
    assert not accepted.duplicate
    assert queue(redis_conn).count == 2


def test_a_push_editing_a_running_requirement_leaves_its_rerun(
    enqueuer: Enqueuer, redis_conn: redis.Redis
) -> None:
    first = request(head_sha="a" * 40)
    [queued] = enqueuer.accept("d-1", [first]).jobs
    redis_conn.hset(Job.key_for(queued.id), "status", JobStatus.STARTED.value)  # a worker took it
    edited = request(delivery_id="d-2", head_sha="b" * 40)
    [again] = enqueuer.accept("d-2", [edited]).jobs
    assert (again.id, again.coalesced, again.rerun) == (queued.id, True, True)
    assert json.loads(redis_conn.get(rerun_key(queued.id)) or b"") == edited.model_dump(mode="json")
    # The label added again to an issue whose run is running asks for nothing new.
    label = request(requirement="ISSUE-4", issue_number=4)
    [run] = enqueuer.accept("d-3", [label]).jobs
    redis_conn.hset(Job.key_for(run.id), "status", JobStatus.STARTED.value)
    [label_again] = enqueuer.accept("d-4", [label.model_copy(update={"delivery_id": "d-4"})]).jobs
    assert (label_again.coalesced, label_again.rerun) == (True, False)
    assert redis_conn.get(rerun_key(run.id)) is None


def test_a_queued_run_takes_the_newest_pushs_arguments(
    enqueuer: Enqueuer, redis_conn: redis.Redis
) -> None:
    [queued] = enqueuer.accept("d-1", [request(head_sha="a" * 40)]).jobs
    [again] = enqueuer.accept("d-2", [request(delivery_id="d-2", head_sha="b" * 40)]).jobs
    assert (again.id, again.coalesced, again.rerun) == (queued.id, True, False)
    job = fetch(redis_conn, queued.id)
    assert (job.kwargs["head_sha"], job.kwargs["delivery_id"]) == ("b" * 40, "d-2")
    assert queue(redis_conn).job_ids == [queued.id]  # still one run


def test_one_delivery_naming_one_job_twice_queues_it_once(
    enqueuer: Enqueuer, redis_conn: redis.Redis
) -> None:
    accepted = enqueuer.accept("d-1", [request(), request(head_sha="abc")])
    assert len(accepted.jobs) == 1
    assert queue(redis_conn).count == 1


def test_a_delivery_without_jobs_is_a_programming_error(enqueuer: Enqueuer) -> None:
    with pytest.raises(ValueError, match="at least one job"):
        enqueuer.accept("d-1", [])


# Job ids


def test_job_ids_are_one_per_requirement_per_repository() -> None:
    run = job_id_for(request())
    assert job_id_for(request(delivery_id="other", sender="someone")) == run
    assert job_id_for(request(repo="OCTO/App")) == run  # GitHub names ignore case
    # A retry or plan is a person's request, one job per comment, never merged into the run.
    assert job_id_for(request(kind=JobKind.RETRY, story_id="US-1", comment_id=1)) != run
    assert job_id_for(request(kind=JobKind.PLAN, comment_id=1)) != run
    assert job_id_for(request(repo="octo/other")) != run
    assert job_id_for(request(requirement="docs/requirements/REQ-002.md")) != run
    assert re.fullmatch(r"run-req-001-login-[0-9a-f]{12}", run)


def test_requirement_names_that_slug_alike_get_their_own_job_ids() -> None:
    # The slug folds "_" and "-" (and drops non-Latin letters); the hash of the exact path
    # keeps the ids apart.
    pairs = [("REQ-a_b.md", "REQ-a-b.md"), ("REQ-\u0436.md", "REQ-\u044f.md")]
    for first, second in pairs:
        ids = {job_id_for(request(requirement=f"docs/requirements/{name}")) for name in
               (first, second)}  # fmt: skip
        assert len(ids) == 2


def test_replies_get_an_id_per_comment_apart_from_the_run() -> None:
    cancel = job_id_for(request(kind=JobKind.CANCEL, comment_id=1))
    assert cancel != job_id_for(request())
    assert cancel != job_id_for(request(kind=JobKind.CANCEL, comment_id=2))
    assert cancel.startswith("cancel-")


@pytest.mark.parametrize(
    "requirement",
    [
        "docs/requirements/REQ-$(rm -rf ~) ünïcode `x`.md",
        "docs/requirements/REQ-" + "a" * 300 + ".md",
        "../../.md",
    ],
)
def test_job_ids_never_carry_raw_user_text(requirement: str) -> None:
    job_id = job_id_for(request(requirement=requirement))
    assert re.fullmatch(r"[a-z0-9-]{1,80}", job_id), job_id
