"""The RQ Worker `reqdrive worker` runs: any job that is not one of reqdrive's is refused."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from rq import Queue, Worker
from rq.executions import Execution
from rq.job import Job
from rq.job_lifecycle import call_exception_handlers
from rq.serializers import JSONSerializer

from bot.exceptions import ReqdriveBotError
from bot.jobs.allowlist import current_name, refusal, stored_name
from bot.jobs.job_class import ReqdriveJob
from bot.stores.run_slots import RunSlots
from bot.stores.runs import RunRecords
from worker.confine.redact import Redactor

log = logging.getLogger(__name__)

REFUSED = "job refused: not one of reqdrive's jobs"
JOB_STOPPED = "job stopped by an error it raises on purpose"
# RQ keeps no result for an attempt it retries: the error's sentence waits in the job's meta
# for `reqdrive status` (bot/ops/queue_status.py).
LAST_ERROR = "last_error"
# A run waiting for its installation's slot says so in its meta (`reqdrive status`).
WAITING_META = "waiting"
ERROR_CHARS = 300
# The jobs that run the engine, each holding one of its installation's run slots while it runs.
RUN_JOBS = frozenset(
    {
        "bot.jobs.run_requirement",
        "bot.jobs.retry_stories",
        "bot.jobs.plan_requirement",
        "bot.jobs.resume_run",
    }
)
# A run whose installation has maxConcurrentRuns running waits this long in rq's scheduled
# registry, holding no worker, then is queued again (the scheduler every worker runs).
WAIT_S = 5.0
WAITING = "run waits: its installation has maxConcurrentRuns running"
SLOT_NOT_RENEWED = "run slot not renewed"
FAILURE = (
    "Refused by reqdrive's worker: {reason}. A reqdrive worker runs only the functions in "
    "bot.jobs.__all__ (docs/operations.md); this job was not imported or called."
)


class ReqdriveWorker(Worker):
    """rq's forking Worker, reading jobs as JSON through ReqdriveJob, refusing foreign ones.

    Anyone who can write to Redis can queue a job naming any importable function; rq would
    import and call it in the work horse, with the worker's environment (the App's key). The
    check runs in `execute_job`, where rq hands over each dequeued job before it forks, for
    every way a job reaches the queue (intake, a retry, the scheduler, a dependency).
    """

    def __init__(
        self,
        queues: Any,
        *,
        secrets: Iterable[str] = (),
        max_concurrent_runs: int | None = None,
        installation_runs: Mapping[int, int] | None = None,
        wait_s: float = WAIT_S,
        **options: Any,
    ) -> None:
        self._redactor = Redactor(secrets)  # the service's secrets, kept out of job.meta
        self._max_runs = max_concurrent_runs  # per installation; None: no limit
        # Installations the operator gave a maxConcurrentRuns of their own (REQDRIVE_INSTALLATIONS).
        self._own_max_runs = dict(installation_runs or {})
        self._wait_s = wait_s
        self._holding: tuple[int, str] | None = None  # the slot of the job running now
        # Forced, not defaulted: pickle would run code while merely reading a job. Queues are
        # rebuilt from their names, as `rq worker` hands over its own (pickle, plain Job), and
        # rq's cleanup of a queue's registries reads jobs through the queue's classes.
        options.update(serializer=JSONSerializer, job_class=ReqdriveJob)
        given = [queues] if isinstance(queues, str | Queue) else queues
        names = [queue.name if isinstance(queue, Queue) else queue for queue in given]
        super().__init__(names, **options)

    def execute_job(self, job: Job, queue: Queue) -> None:
        reason = refusal(job)
        if reason is None:
            self._execute_in_slot(job, queue)
            return
        log.warning(REFUSED, extra={"job_id": job.id, "func": stored_name(job), "reason": reason})
        job.retries_left = None  # whatever retries it asked for: it would be refused again
        queue.intermediate_queue.remove(job.id)  # rq's dequeue parked it there for the horse
        self.handle_job_failure(job, queue=queue, exc_string=FAILURE.format(reason=reason))

    def _execute_in_slot(self, job: Job, queue: Queue) -> None:
        """A run's job runs holding one of its installation's slots; with none free it goes
        back to wait, so one busy installation never holds every worker."""
        slot = self._slot_of(job)
        slots = RunSlots(self.connection)
        limit = self._own_max_runs.get(slot[0], self._max_runs or 0) if slot else 0
        if slot is not None and not slots.acquire(*slot, limit):
            self._wait(job, queue, slot[0])
            return
        self._holding = slot
        if job.meta.pop(WAITING_META, None) is not None:
            job.save_meta()  # type: ignore[no-untyped-call]
        try:
            super().execute_job(job, queue)
        finally:
            self._holding = None
            if slot is not None:
                slots.release(*slot)

    def _slot_of(self, job: Job) -> tuple[int, str] | None:
        """(installation, job id) for a run's job under a limit; None for any other job."""
        if self._max_runs is None or current_name(str(job.func_name)) not in RUN_JOBS:
            return None
        arguments = job.kwargs
        installation = arguments.get("installation_id")
        if "run_id" in arguments:  # resume_run: the run's record knows its installation
            record = RunRecords(self.connection).load(str(arguments["run_id"]))
            installation = record.installation_id if record is not None else None
        return (installation, job.id) if isinstance(installation, int) else None

    def _wait(self, job: Job, queue: Queue, installation_id: int) -> None:
        queue.intermediate_queue.remove(job.id)  # rq's dequeue parked it there for the horse
        job.meta[WAITING_META] = "for its installation's runs below its maxConcurrentRuns"
        queue.schedule_job(job, datetime.now(UTC) + timedelta(seconds=self._wait_s))
        log.info(WAITING, extra={"job_id": job.id, "installation_id": installation_id})

    def maintain_heartbeats(self, job: Job, execution: Execution) -> None:
        super().maintain_heartbeats(job, execution)
        if self._holding is None:
            return
        try:  # the slot's lease lives as long as this worker watches the job
            RunSlots(self.connection).renew(*self._holding)
        except redis.RedisError:
            log.warning(SLOT_NOT_RENEWED, extra={"job_id": job.id})

    def handle_exception(self, job: Job, *exc_info: Any) -> None:
        """Keep the error's sentence with the job; an error the bot raises on purpose (a
        missing setting: "the worker needs the App's identity") is one log line, not a
        traceback, on every attempt."""
        error = exc_info[1]
        sentence = self.sentence(error)
        job.meta[LAST_ERROR] = sentence
        job.save_meta()  # type: ignore[no-untyped-call]
        if not isinstance(error, ReqdriveBotError):
            super().handle_exception(job, *exc_info)
            return
        log.error(
            JOB_STOPPED,
            # rq's next line says whether it runs again ("scheduled for retry ...").
            extra={"job_id": job.id, "error": sentence, "error_type": type(error).__name__},
        )
        call_exception_handlers(self._exc_handlers, job, *exc_info)

    def sentence(self, error: BaseException | None) -> str:
        """The error's first line, redacted: "ConfigurationError: the worker needs ..."."""
        said = str(error).strip().splitlines() if error is not None else []
        kind = type(error).__name__
        line = f"{kind}: {said[0]}" if said else kind
        # Redacted whole, then cut: a secret cut in two would no longer match.
        return self._redactor.redact(line)[:ERROR_CHARS]
