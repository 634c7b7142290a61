"""Record a delivery and queue its jobs in Redis: one atomic script, one round trip."""

from __future__ import annotations

import hashlib
import json
import os
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, cast

import redis
from redis.exceptions import NoScriptError
from rq import Queue, Retry
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from rq.utils import now, utcformat

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
# save_unique_job script stores (Job.to_dict(), see JobTemplate), so the job stays a normal
# RQ job.
#
# The jobs travel as one MessagePack argument (Redis's Lua has cmsgpack): packing dozens of
# separate arguments cost more than the script itself. Every value is a msgpack str, which
# cmsgpack hands to Lua byte for byte, so the zlib-compressed `data` field survives (cjson
# would not). All reads happen before any write, and the delivery is marked last: if the
# script fails, nothing was written, so GitHub's redelivery is processed as new. With AOF,
# Redis logs the script's writes as one transaction.
ACCEPT_SCRIPT = """
-- KEYS: 1 delivery, 2 queue, 3 set of queues, 4 finished, 5 failed, 6 canceled, 7.. jobs
-- ARGV: 1 delivery ttl, 2 msgpack array of jobs, each {kind, at_front, id, field, value, ...}
local seen = redis.call('GET', KEYS[1])
if seen then return {0, seen} end
local ACTIVE = {queued = true, started = true, deferred = true, scheduled = true}
local jobs = cmsgpack.unpack(ARGV[2])
for i, job in ipairs(jobs) do
  local status = redis.call('HGET', KEYS[6 + i], 'status')
  job.ran = status ~= false
  job.coalesced = (status and ACTIVE[status]) or false
end
local record = {}
for i, job in ipairs(jobs) do
  local key, id = KEYS[6 + i], job[3]
  if not job.coalesced then
    -- A finished, failed or canceled run: drop its fields, expiry and registry entries.
    -- A new id needs none of that (nor does rq's own enqueue): a registry entry whose hash
    -- expired has expired too, and rq's registry cleanup drops it.
    if job.ran then
      redis.call('DEL', key)
      for r = 4, 6 do redis.call('ZREM', KEYS[r], id) end
    end
    redis.call('HSET', key, unpack(job, 4))
    if job[2] == '1' then
      redis.call('LPUSH', KEYS[2], id)
    else
      redis.call('RPUSH', KEYS[2], id)
    end
  end
  record[i] = {id = id, kind = job[1], coalesced = job.coalesced}
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


class JobTemplate:
    """One kind's RQ job hash, made once from rq's own Job.to_dict(); filled per request.

    Job.create and to_dict per delivery cost more than the rest of the trigger path; only
    five fields differ between two jobs of one kind, and those are computed here as rq
    computes them (tests compare the result with Job.create(...).to_dict()).
    """

    VARYING = frozenset({"data", "description", "meta", "created_at", "enqueued_at"})

    def __init__(
        self, kind: JobKind, queue_name: str, timeout_s: int, connection: redis.Redis
    ) -> None:
        self.func_name = JOB_FUNCTIONS[kind]
        work = kind in WORK_KINDS
        model = Job.create(
            self.func_name,
            connection=connection,
            serializer=JSONSerializer,
            id="template",
            status=JobStatus.QUEUED,
            timeout=timeout_s if work else COMMAND_TIMEOUT_S,
            retry=RUN_RETRY if work else COMMAND_RETRY,
            result_ttl=RESULT_TTL_S,
            origin=queue_name,
            meta={"kind": kind.value},
            description=kind.value,
        )
        model.enqueued_at = now()
        encode: Callable[[object], bytes] = connection.get_encoder().encode  # as HSET stores it
        stored = {k: encode(v) for k, v in model.to_dict().items() if v is not None}
        if not stored.keys() >= self.VARYING:
            raise RuntimeError(f"rq's job hash changed shape: {sorted(stored)}")  # rq upgrade
        fixed = {k: v for k, v in stored.items() if k not in self.VARYING}
        # Queue replies ahead of runs: a comment's answer must not wait behind queued runs.
        self._head = _mp_str(kind.value.encode()) + _mp_str(b"0" if work else b"1")
        self._fixed_packed = b"".join(_mp_str(x) for kv in fixed.items() for x in
                                      (kv[0].encode(), kv[1]))  # fmt: skip
        self._names = {name: _mp_str(name.encode()) for name in self.VARYING}
        self._array = _mp_array_header(3 + 2 * (len(fixed) + len(self.VARYING)))

    def packed(self, job_id: str, request: RunRequest, at: datetime) -> bytes:
        """This job as the accept script reads it: kind, at_front, id, then its fields."""
        parts = [self._array, self._head, _mp_str(job_id.encode()), self._fixed_packed]
        for name, value in self._varying(request, at).items():
            parts += (self._names[name], _mp_str(value))
        return b"".join(parts)

    def _varying(self, request: RunRequest, at: datetime) -> dict[str, bytes]:
        # As rq makes them: JSONSerializer.dumps is json.dumps(...).encode(), data compressed.
        call = (self.func_name, None, (), request.model_dump(mode="json"))
        stamp = utcformat(at).encode()
        description = f"{request.kind.value} {request.repo} {request.requirement or ''}"
        meta = {"kind": request.kind.value, "delivery_id": request.delivery_id}
        return {
            "data": zlib.compress(json.dumps(call).encode()),
            "description": description.encode(),
            "meta": json.dumps(meta).encode(),
            "created_at": stamp,
            "enqueued_at": stamp,
        }


def _mp_str(value: bytes) -> bytes:
    """A MessagePack str holding these exact bytes (fixstr, str8, str16 or str32)."""
    n = len(value)
    if n < 32:
        return bytes((0xA0 | n,)) + value
    if n < 0x100:
        return b"\xd9" + bytes((n,)) + value
    if n < 0x10000:
        return b"\xda" + n.to_bytes(2, "big") + value
    return b"\xdb" + n.to_bytes(4, "big") + value


def _mp_array_header(n: int) -> bytes:
    return b"\xdc" + n.to_bytes(2, "big")  # array16: a delivery never names 65,536 jobs


class _Connection(Protocol):
    """The part of redis-py's Connection that ScriptCall uses (redis-py leaves it untyped)."""

    def send_packed_command(self, command: list[bytes], check_health: bool = True) -> None: ...
    def send_command(self, *args: bytes | str, check_health: bool = True) -> None: ...
    def read_response(self) -> object: ...
    def disconnect(self) -> None: ...


class ScriptCall:
    """EVALSHA of one script on connections of its own: redis-py's client costs ~40 us a call.

    The client's retry and observability layers and the pool's per-checkout probe (two
    ioctls and a recv) cost more CPU than Redis spends running the script. The connections
    are redis-py's own, built from the client's URL, timeouts and TLS settings; one per
    concurrent caller, forgotten after a fork.
    """

    def __init__(self, client: redis.Redis, script: str) -> None:
        self._pool = client.connection_pool
        self._script = script.encode()
        sha = hashlib.sha1(self._script, usedforsecurity=False).hexdigest().encode()
        self._head = _bulk(b"EVALSHA") + _bulk(sha)
        self._idle: list[_Connection] = []
        self._pid = os.getpid()

    def __call__(self, keys: list[bytes], args: list[bytes]) -> object:
        """The script's reply; redis.RedisError if it failed or Redis did not answer."""
        parts = [b"*%d\r\n" % (3 + len(keys) + len(args)), self._head, _bulk(b"%d" % len(keys))]
        command = [b"".join([*parts, *map(_bulk, keys), *map(_bulk, args)])]  # one sendall
        conn = self._checkout()
        try:
            try:
                return self._send(conn, command)
            except (redis.ConnectionError, redis.TimeoutError):
                # Redis closed an idle connection or restarted: once more on a new one, as
                # redis-py's Retry(NoBackoff(), 1) did. A retried script that had run finds
                # its delivery recorded and answers "duplicate".
                conn.disconnect()
                return self._send(conn, command)
        except BaseException:
            conn.disconnect()  # never leave half a reply on a connection that is reused
            raise
        finally:
            self._idle.append(conn)

    def _send(self, conn: _Connection, command: list[bytes]) -> object:
        conn.send_packed_command(command, check_health=False)
        try:
            return conn.read_response()
        except NoScriptError:  # Redis restarted or SCRIPT FLUSH: load it, then run it
            conn.send_command("SCRIPT", "LOAD", self._script, check_health=False)
            conn.read_response()
            conn.send_packed_command(command, check_health=False)
            return conn.read_response()

    def _checkout(self) -> _Connection:
        if self._pid != os.getpid():  # a forked worker must not share its parent's sockets
            self._idle, self._pid = [], os.getpid()
        try:
            return self._idle.pop()
        except IndexError:
            return cast(_Connection, self._pool.connection_class(**self._pool.connection_kwargs))


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%b\r\n" % (len(value), value)  # one RESP bulk string


class Enqueuer:
    """Queues RunRequests as RQ jobs on one queue, deduplicating deliveries."""

    def __init__(self, connection: redis.Redis, queue_name: str, job_timeout_s: int) -> None:
        queue = Queue(queue_name, connection=connection, serializer=JSONSerializer)
        self.templates = {
            kind: JobTemplate(kind, queue_name, job_timeout_s, connection) for kind in JobKind
        }
        self._script = ScriptCall(connection, ACCEPT_SCRIPT)
        self._fixed_keys = [
            key.encode()
            for key in (
                queue.key,
                Queue.redis_queues_keys,
                queue.finished_job_registry.key,
                queue.failed_job_registry.key,
                queue.canceled_job_registry.key,
            )
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
        jobs = [self.templates[r.kind].packed(job_id, r, at) for job_id, r in by_id.items()]
        keys = [DELIVERY_KEY.format(delivery_id).encode(), *self._fixed_keys]
        keys += [Job.key_for(job_id).encode() for job_id in by_id]
        args = [b"%d" % DELIVERY_TTL_S, b"".join([_mp_array_header(len(jobs)), *jobs])]
        try:
            reply = self._script(keys, args)
        except redis.RedisError as exc:
            raise QueueUnavailable(type(exc).__name__) from exc
        status, record = cast(tuple[int, bytes], reply)
        queued = tuple(QueuedJob(**item) for item in json.loads(record))
        return Accepted(queued, duplicate=status == 0)
