"""Stand-ins for bot.jobs that only record they ran, for tests of what the intake queues.

`SimpleWorker(..., job_class=RecordingJob)` runs a queued `bot.jobs.<name>` job as the
function of the same name here: the job's name and arguments are exactly what the web
process stored, and no GitHub or git work happens.
"""

from __future__ import annotations

import json
from typing import Any

from rq import get_current_job
from rq.job import Job

from bot.requests import JobKind, RunRequest

JOB_LOG_KEY = "reqdrive-tests:job-log"
JOBS_PREFIX = "bot.jobs."
KINDS = {
    "run_requirement": JobKind.RUN,
    "retry_stories": JobKind.RETRY,
    "plan_requirement": JobKind.PLAN,
    "cancel_run": JobKind.CANCEL,
    "report_status": JobKind.STATUS,
    "reply_help": JobKind.HELP,
}


class RecordingJob(Job):
    """rq's Job, running bot.jobs.<name> as this module's recorder of the same name."""

    # rq's own property, called through the class (mypy types a property read off its class
    # as its value, hence the ignores); super() cannot reach a property's setter.
    @property
    def func_name(self) -> str | None:
        name: str | None = Job.func_name.fget(self)  # type: ignore[attr-defined]
        if name is None or not name.startswith(JOBS_PREFIX):
            return name
        return f"{__name__}.{name.removeprefix(JOBS_PREFIX)}"

    @func_name.setter
    def func_name(self, value: Any) -> None:
        Job.func_name.fset(self, value)  # type: ignore[attr-defined]


def _record(name: str, arguments: dict[str, object]) -> dict[str, object]:
    request = RunRequest.model_validate(arguments)
    assert request.kind is KINDS[name], f"a {request.kind} request reached {name}"
    job = get_current_job()
    assert job is not None
    entry = {"job_id": job.id, **request.model_dump(mode="json")}
    job.connection.rpush(JOB_LOG_KEY, json.dumps(entry))
    return entry


def run_requirement(**arguments: object) -> dict[str, object]:
    return _record("run_requirement", arguments)


def retry_stories(**arguments: object) -> dict[str, object]:
    return _record("retry_stories", arguments)


def plan_requirement(**arguments: object) -> dict[str, object]:
    return _record("plan_requirement", arguments)


def cancel_run(**arguments: object) -> dict[str, object]:
    return _record("cancel_run", arguments)


def report_status(**arguments: object) -> dict[str, object]:
    return _record("report_status", arguments)


def reply_help(**arguments: object) -> dict[str, object]:
    return _record("reply_help", arguments)
