"""The RQ Worker `reqdrive worker` runs: any job that is not one of reqdrive's is refused."""

from __future__ import annotations

import logging
from typing import Any

from rq import Queue, Worker
from rq.job import Job
from rq.serializers import JSONSerializer

from bot.jobs.allowlist import refusal, stored_name
from bot.jobs.job_class import ReqdriveJob

log = logging.getLogger(__name__)

REFUSED = "job refused: not one of reqdrive's jobs"
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

    def __init__(self, queues: Any, **options: Any) -> None:
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
            super().execute_job(job, queue)
            return
        log.warning(REFUSED, extra={"job_id": job.id, "func": stored_name(job), "reason": reason})
        job.retries_left = None  # whatever retries it asked for: it would be refused again
        queue.intermediate_queue.remove(job.id)  # rq's dequeue parked it there for the horse
        self.handle_job_failure(job, queue=queue, exc_string=FAILURE.format(reason=reason))
