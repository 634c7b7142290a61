"""Record a delivery and queue its jobs in Redis: one atomic script, one round trip."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

import redis
from rq import Queue, Retry
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from rq.utils import now

from bot.exceptions import QueueUnavailable
from worker.requests import JobKind, RunRequest

DELIVERY_KEY = "reqdrive:delivery:{}"
# GitHub lets a maintainer redeliver for 3 days; keep ids longer so a redelivery is never
# mistaken for a new delivery.
DELIVERY_TTL_S = 5 * 24 * 3600
COMMAND_TIMEOUT_S = 600
RESULT_TTL_S = 7 * 24 * 3600
# Runs: a failure or an abandoned job (worker killed; rq 2.12's StartedJobRegistry.cleanup
# calls job.retry while retries_left > 0) is retried after a pause; the run resumes from its
# checkpoint. Intervals need the scheduler (`rq worker --with-scheduler`).
RUN_RETRY = Retry(max=2, interval=[60, 300])
COMMAND_RETRY = Retry(max=2)  # no interval: requeued at once, no scheduler needed

JOB_FUNCTIONS = {
    JobKind.RUN: "worker.jobs.run_requirement",
    JobKind.RETRY: "worker.jobs.retry_stories",
    JobKind.PLAN: "worker.jobs.plan_requirement",
    JobKind.CANCEL: "worker.jobs.cancel_run",
    JobKind.STATUS: "worker.jobs.report_status",
    JobKind.HELP: "worker.jobs.reply_help",
}
# Jobs that work on the requirement share its id, so they never run twice at once; the
# others answer a comment and must not be swallowed by a queued run.
WORK_KINDS = frozenset({JobKind.RUN, JobKind.RETRY, JobKind.PLAN})
SLUG_RE = re.compile(r"[^a-z0-9]+")
SLUG_MAX = 40

# Why not rq's Queue.enqueue(..., unique=True): it refuses any id whose hash still exists,
# and a finished or failed job's hash lives for result_ttl/failure_ttl (a year), so a
# requirement could never run again; it also costs extra round trips (SADD, INFO) and cannot
# record the delivery in the same atomic step. This script stores the same fields rq's own
# save_unique_job script stores (Job.to_dict()), so the job stays a normal RQ job.
#
# All reads happen before any write, and the delivery is marked last: if the script fails,
# nothing was written, so GitHub's redelivery is processed as new. With AOF, Redis logs the
# script's writes as one transaction.
ACCEPT_SCRIPT = """
-- KEYS: 1 delivery, 2 queue, 3 set of queues, 4 finished, 5 failed, 6 canceled, 7.. jobs
-- ARGV: 1 delivery ttl, 2 job count, then per job: id, kind, at_front, n, n field/values
local seen = redis.call('GET', KEYS[1])
if seen then return {0, seen} end
local ACTIVE = {queued = true, started = true, deferred = true, scheduled = true}
local jobs, pos = {}, 3
for i = 1, tonumber(ARGV[2]) do
  local n = tonumber(ARGV[pos + 3])
  local status = redis.call('HGET', KEYS[6 + i], 'status')
  jobs[i] = {key = KEYS[6 + i], id = ARGV[pos], kind = ARGV[pos + 1], front = ARGV[pos + 2],
             first = pos + 4, last = pos + 3 + n,
             coalesced = (status and ACTIVE[status]) or false}
  pos = pos + 4 + n
end
local record = {}
for i, job in ipairs(jobs) do
  if not job.coalesced then
    redis.call('DEL', job.key)  -- drops the last run's fields and its expiry
    for r = 4, 6 do redis.call('ZREM', KEYS[r], job.id) end
    redis.call('HSET', job.key, unpack(ARGV, job.first, job.last))
    if job.front == '1' then
      redis.call('LPUSH', KEYS[2], job.id)
    else
      redis.call('RPUSH', KEYS[2], job.id)
    end
  end
  record[i] = {id = job.id, kind = job.kind, coalesced = job.coalesced}
end
redis.call('SADD', KEYS[3], KEYS[2])
local encoded = cjson.encode(record)
redis.call('SET', KEYS[1], encoded, 'EX', ARGV[1])
return {1, encoded}
"""


@dataclass(frozen=True)
class QueuedJob:
    """A job a delivery asked for; coalesced when an equal job was already queued or running."""

    id: str
    kind: str
    coalesced: bool


@dataclass(frozen=True)
class Accepted:
    """The outcome of one delivery: its jobs, and whether it had been accepted before."""

    jobs: tuple[QueuedJob, ...]
    duplicate: bool = False


def job_id_for(request: RunRequest) -> str:
    """Deterministic and safe: only [a-z0-9-], no raw user text beyond a sanitised slug."""
    target = request.requirement or f"PR-{request.issue_number}"
    key = [request.repo.lower(), target]
    prefix = "run"
    if request.kind not in WORK_KINDS:
        key.append(str(request.comment_id))  # one job per command comment
        prefix = request.kind.value
    digest = hashlib.sha256("\n".join(key).encode()).hexdigest()[:12]
    name = target.rsplit("/", 1)[-1].removesuffix(".md")
    slug = SLUG_RE.sub("-", name.lower()).strip("-")[:SLUG_MAX].strip("-")
    return f"{prefix}-{slug}-{digest}" if slug else f"{prefix}-{digest}"


class Enqueuer:
    """Queues RunRequests as RQ jobs on one queue, deduplicating deliveries."""

    def __init__(self, connection: redis.Redis, queue_name: str, job_timeout_s: int) -> None:
        self._connection = connection
        self._queue = Queue(queue_name, connection=connection, serializer=JSONSerializer)
        self._job_timeout_s = job_timeout_s
        # Registered once: redis-py sends EVALSHA and loads the script only if Redis lost it.
        self._script = connection.register_script(ACCEPT_SCRIPT)
        self._fixed_keys = [
            self._queue.key,
            Queue.redis_queues_keys,
            self._queue.finished_job_registry.key,
            self._queue.failed_job_registry.key,
            self._queue.canceled_job_registry.key,
        ]

    def accept(self, delivery_id: str, requests: list[RunRequest]) -> Accepted:
        """Queue the requests unless this delivery was accepted before; raise if Redis fails."""
        # Two triggers of one delivery for the same job (a file listed twice) are one job.
        by_id: dict[str, RunRequest] = {}
        for request in requests:
            by_id.setdefault(job_id_for(request), request)
        if not by_id:
            raise ValueError("a delivery is accepted only for at least one job")
        args: list[bytes | str | int | float] = [DELIVERY_TTL_S, len(by_id)]
        keys = [DELIVERY_KEY.format(delivery_id), *self._fixed_keys]
        for job_id, request in by_id.items():
            job = self._job(job_id, request)
            fields = [x for k, v in job.to_dict().items() if v is not None for x in (k, v)]
            front = "0" if request.kind in WORK_KINDS else "1"  # replies skip the queued runs
            args += [job_id, request.kind.value, front, len(fields), *fields]
            keys.append(job.key)
        try:
            status, record = self._script(keys=keys, args=args)
        except redis.RedisError as exc:
            raise QueueUnavailable(type(exc).__name__) from exc
        queued = tuple(QueuedJob(**item) for item in json.loads(record))
        return Accepted(queued, duplicate=status == 0)

    def _job(self, job_id: str, request: RunRequest) -> Job:
        work = request.kind in WORK_KINDS
        job = Job.create(
            JOB_FUNCTIONS[request.kind],
            kwargs=request.model_dump(mode="json"),
            connection=self._connection,
            serializer=JSONSerializer,
            id=job_id,
            status=JobStatus.QUEUED,
            timeout=self._job_timeout_s if work else COMMAND_TIMEOUT_S,
            retry=RUN_RETRY if work else COMMAND_RETRY,
            result_ttl=RESULT_TTL_S,
            origin=self._queue.name,
            meta={"kind": request.kind.value, "delivery_id": request.delivery_id},
            description=f"{request.kind.value} {request.repo} {request.requirement or ''}",
        )
        job.enqueued_at = now()
        return job
