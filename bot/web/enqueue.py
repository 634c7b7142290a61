"""Record a delivery and queue its jobs in Redis: one atomic script, one round trip."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import cast

import msgpack
import redis
from rq import Queue, Retry
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from rq.utils import now

from bot.exceptions import QueueUnavailable
from bot.requests import JobKind, RunRequest
from bot.stores.deliveries import DELIVERY_TTL_S, RERUN_TTL_S, delivery_key, rerun_key
from worker.model.slugs import slugify

COMMAND_TIMEOUT_S = 600
RESULT_TTL_S = 7 * 24 * 3600
# Runs: a job that raised, or whose work horse died, is retried after a pause (rq 3's worker
# on a dead horse, and StartedJobRegistry.cleanup on an abandoned job, call job.retry while
# retries_left > 0). That retry only runs a run that never reached its checkpoint: one that
# did is resumed by the recovery sweeper alone, and the retried job leaves it (bot/jobs).
# Intervals need the scheduler (`rq worker --with-scheduler`).
RUN_RETRY = Retry(max=2, interval=[60, 300])
COMMAND_RETRY = Retry(max=2)  # no interval: requeued at once, no scheduler needed

# The job functions the worker runs, by name: the web process only writes these strings, so
# renaming one needs the worker to keep answering to the old name (see bot/jobs/entry_points.py).
JOB_FUNCTIONS = {
    JobKind.RUN: "bot.jobs.run_requirement",
    JobKind.RETRY: "bot.jobs.retry_stories",
    JobKind.PLAN: "bot.jobs.plan_requirement",
    JobKind.CANCEL: "bot.jobs.cancel_run",
    JobKind.STATUS: "bot.jobs.report_status",
    JobKind.HELP: "bot.jobs.reply_help",
    JobKind.CLOSE: "bot.jobs.close_run",
    JobKind.UNINSTALL: "bot.jobs.drop_installation",
    JobKind.SCAN: "bot.jobs.scan_push",
    JobKind.CI_FIX: "bot.jobs.fix_ci",
    JobKind.HANDOFF: "bot.jobs.hand_off",
    JobKind.FEEDBACK: "bot.jobs.address_feedback",
}
# Only runs share their requirement's job id and coalesce: the same label or push twice is
# one run. A retry, plan or any other command is a person's request: one job per comment, so
# none is swallowed by a queued run; the job itself refuses to run beside a running one.
COALESCING_KINDS = frozenset({JobKind.RUN})
# Jobs that run the engine (its timeout and retries, queued behind replies).
ENGINE_KINDS = frozenset(
    {JobKind.RUN, JobKind.RETRY, JobKind.PLAN, JobKind.CI_FIX, JobKind.FEEDBACK}
)
SLUG_MAX = 40

# Why not rq's Queue.enqueue(..., unique=True): it refuses any id whose hash still exists,
# and a finished or failed job's hash lives for result_ttl/failure_ttl (a year), so a
# requirement could never run again; it also cannot record the delivery, coalesce, and queue
# in one atomic step. The job hash this script stores is rq's own `Job.to_dict()`, made by
# rq for every job, so the job stays a normal RQ job that any rq version reads as its own.
#
# A coalescing job that is already queued takes the newest trigger's arguments (a second push
# editing a requirement runs the newest text); one that has started leaves them at the rerun
# key when the trigger asks for a re-run (a push), so the running job queues it when it ends.
# All reads happen before any write, and the delivery is marked last: if the script fails,
# nothing was written, so GitHub's redelivery is processed as new.
ACCEPT_SCRIPT = """
-- KEYS: 1 delivery, 2 queue, 3 set of queues, 4 finished, 5 failed, 6 canceled,
--       then per job: its hash, its rerun key
-- ARGV: 1 delivery ttl, 2 rerun ttl, 3 msgpack array of jobs
--       {id, kind, front, coalesce, rerun (JSON or ''), fields {name: value}}
local seen = redis.call('GET', KEYS[1])
if seen then return {0, seen} end
local ACTIVE = {queued = true, started = true, deferred = true, scheduled = true}
local jobs = cmsgpack.unpack(ARGV[3])
for i, job in ipairs(jobs) do
  job.status = redis.call('HGET', KEYS[5 + 2 * i], 'status')
end
local record = {}
for i, job in ipairs(jobs) do
  local key, rerun_key = KEYS[5 + 2 * i], KEYS[6 + 2 * i]
  local active = job.status and ACTIVE[job.status]
  local coalesced = (job.coalesce and active) and true or false
  local rerun = false
  if coalesced and job.status == 'started' then
    if job.rerun ~= '' then
      redis.call('SET', rerun_key, job.rerun, 'EX', ARGV[2])
      rerun = true
    end
  elseif coalesced then
    -- Still waiting: it runs with the newest trigger's arguments.
    for _, name in ipairs({'data', 'description', 'meta'}) do
      redis.call('HSET', key, name, job.fields[name])
    end
  else
    -- A finished, failed or canceled job of the same id: drop its fields, expiry and
    -- registry entries. (A registry entry whose hash expired has expired too.)
    if job.status then
      redis.call('DEL', key)
      for r = 4, 6 do redis.call('ZREM', KEYS[r], job.id) end
    end
    for name, value in pairs(job.fields) do redis.call('HSET', key, name, value) end
    if job.front then
      redis.call('LPUSH', KEYS[2], job.id)
    else
      redis.call('RPUSH', KEYS[2], job.id)
    end
  end
  record[i] = {id = job.id, kind = job.kind, coalesced = coalesced, rerun = rerun}
end
redis.call('SADD', KEYS[3], KEYS[2])
local encoded = cjson.encode(record)
redis.call('SET', KEYS[1], encoded, 'EX', ARGV[1])
return {1, encoded}
"""


@dataclass(frozen=True)
class QueuedJob:
    """A job a delivery asked for; coalesced when an equal run was already queued or running,
    rerun when that run is running and will run again on this delivery's arguments."""

    id: str
    kind: str
    coalesced: bool
    rerun: bool = False


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
    if request.kind not in COALESCING_KINDS:
        # One job per command comment, review or line comment: a feedback job reads what is
        # waiting on its PR when it starts, so later ones find theirs taken (bot/jobs/feedback.py).
        key.append(str(request.comment_id or request.review_id or request.review_comment_id))
        prefix = request.kind.value
    if request.kind in (JobKind.CI_FIX, JobKind.HANDOFF):  # one per CI result, one per push
        ci = (request.workflow_run_id, request.check_suite_id, request.head_sha)
        key += [str(value) for value in ci if value]
    digest = hashlib.sha256("\n".join(key).encode()).hexdigest()[:12]
    name = target.rsplit("/", 1)[-1].removesuffix(".md")
    return f"{prefix}-{slugify(name, max_len=SLUG_MAX)}-{digest}"


def rq_job(
    connection: redis.Redis,
    job_id: str,
    request: RunRequest,
    queue_name: str,
    timeout_s: int,
    at: datetime,
) -> Job:
    """The job rq itself would store for this request (rq's public Job.create; nothing is
    written: the accept script stores its to_dict())."""
    kind = request.kind
    runs = kind in ENGINE_KINDS
    job = Job.create(
        JOB_FUNCTIONS[kind],
        kwargs=request.model_dump(mode="json"),
        connection=connection,
        serializer=JSONSerializer,
        id=job_id,
        status=JobStatus.QUEUED,
        timeout=timeout_s if runs else COMMAND_TIMEOUT_S,
        retry=RUN_RETRY if runs else COMMAND_RETRY,
        result_ttl=RESULT_TTL_S,
        origin=queue_name,
        meta={"kind": kind.value, "delivery_id": request.delivery_id},
        description=f"{kind.value} {request.repo} {request.requirement or ''}",
    )
    job.created_at = job.enqueued_at = at
    return job


class Enqueuer:
    """Queues RunRequests as RQ jobs on one queue, deduplicating deliveries."""

    def __init__(self, connection: redis.Redis, queue_name: str, job_timeout_s: int) -> None:
        queue = Queue(queue_name, connection=connection, serializer=JSONSerializer)
        self._connection = connection
        self._queue_name = queue_name
        self._timeout_s = job_timeout_s
        self._encode = connection.get_encoder().encode
        # redis-py's Script: EVALSHA, loading the script again after a Redis restart.
        self._script = connection.register_script(ACCEPT_SCRIPT)
        self._fixed_keys = [
            queue.key,
            Queue.redis_queues_keys,
            queue.finished_job_registry.key,
            queue.failed_job_registry.key,
            queue.canceled_job_registry.key,
        ]

    def accept(self, delivery_id: str, requests: list[RunRequest]) -> Accepted:
        """Queue the requests unless this delivery was accepted before; raise if Redis fails."""
        # Two triggers of one delivery for the same job (a file listed twice) are one job.
        by_id: dict[str, RunRequest] = {}
        for request in requests:
            by_id.setdefault(job_id_for(request), request)
        if not by_id:
            raise ValueError("a delivery is accepted only for at least one job")
        at = now()
        keys = [delivery_key(delivery_id), *self._fixed_keys]
        jobs = []
        for job_id, request in by_id.items():
            keys += [Job.key_for(job_id), rerun_key(job_id)]
            jobs.append(self._packed(job_id, request, at))
        # use_bin_type=False: Redis's cmsgpack reads only msgpack's str family, which carries
        # any bytes (the compressed job data) to Lua unchanged.
        args = [DELIVERY_TTL_S, RERUN_TTL_S, msgpack.packb(jobs, use_bin_type=False)]
        try:
            reply = self._script(keys=keys, args=args)
        except redis.RedisError as exc:
            raise QueueUnavailable(type(exc).__name__) from exc
        status, record = cast(tuple[int, bytes], reply)
        queued = tuple(QueuedJob(**item) for item in json.loads(record))
        return Accepted(queued, duplicate=status == 0)

    def _packed(self, job_id: str, request: RunRequest, at: datetime) -> dict[str, object]:
        job = rq_job(self._connection, job_id, request, self._queue_name, self._timeout_s, at)
        # As HSET would store each value (redis-py leaves its encoder unannotated).
        encode: Callable[[object], bytes] = self._encode
        fields = {k: encode(v) for k, v in job.to_dict().items() if v is not None}
        coalesce = request.kind in COALESCING_KINDS
        # Only a push asks for a re-run: its file changed. A label added again while its run
        # is running asks for nothing new.
        rerun = json.dumps(request.model_dump(mode="json")) if coalesce and request.head_sha else ""
        return {
            "id": job_id,
            "kind": request.kind.value,
            # Replies ahead of runs: a comment's answer must not wait behind queued runs.
            "front": request.kind not in ENGINE_KINDS,
            "coalesce": coalesce,
            "rerun": rerun,
            "fields": fields,
        }
