"""Thin RQ entry points: plain JSON keyword arguments in, one function per job kind.

Until the engine is wired in (a later issue), every job only records that it ran: it validates
its arguments as a RunRequest, writes `job.meta["ran"]`, and appends one JSON line to the Redis
list `reqdrive:job-log`. It plans nothing, runs no agent and calls no GitHub API.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from rq import get_current_job

from worker.requests import JobKind, RunRequest

JOB_LOG_KEY = "reqdrive:job-log"

log = logging.getLogger(__name__)


def run_requirement(**arguments: object) -> dict[str, object]:
    """Plan (if needed) and implement one requirement."""
    return _record(JobKind.RUN, arguments)


def retry_stories(**arguments: object) -> dict[str, object]:
    """Re-run one story ("/reqdrive retry US-003") or every failed one."""
    return _record(JobKind.RETRY, arguments)


def plan_requirement(**arguments: object) -> dict[str, object]:
    """Plan only and report the stories."""
    return _record(JobKind.PLAN, arguments)


def cancel_run(**arguments: object) -> dict[str, object]:
    """Stop the requirement's run and keep what passed."""
    return _record(JobKind.CANCEL, arguments)


def report_status(**arguments: object) -> dict[str, object]:
    """Reply with the requirement's run state."""
    return _record(JobKind.STATUS, arguments)


def reply_help(**arguments: object) -> dict[str, object]:
    """Reply with the commands reqdrive understands."""
    return _record(JobKind.HELP, arguments)


def _record(kind: JobKind, arguments: dict[str, object]) -> dict[str, object]:
    request = RunRequest.model_validate(arguments)
    if request.kind is not kind:
        raise ValueError(f"a {request.kind} request reached the {kind} job")
    job = get_current_job()
    if job is None:
        raise RuntimeError("worker.jobs functions run inside an RQ worker")
    entry = {"job_id": job.id, "ran_at": datetime.now(UTC).isoformat(),
             **request.model_dump(mode="json")}  # fmt: skip
    job.meta["ran"] = entry
    job.save_meta()  # type: ignore[no-untyped-call]  # rq leaves it unannotated
    job.connection.rpush(JOB_LOG_KEY, json.dumps(entry))
    log.info("job recorded", extra={"job_id": job.id, "kind": kind.value, "repo": request.repo})
    return entry
