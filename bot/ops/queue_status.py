"""What the workers are doing, read through rq's public API: queued, retrying, running, failed,
finished."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import redis
from rq import Queue, Worker
from rq.job import Job
from rq.registry import (
    BaseRegistry,
    FailedJobRegistry,
    FinishedJobRegistry,
    ScheduledJobRegistry,
    StartedJobRegistry,
)
from rq.serializers import JSONSerializer

DEFAULT_FINISHED = 10
# "retrying": failed, and scheduled to run again (RUN_RETRY, COMMAND_RETRY in bot/web/enqueue.py).
STATES = ("queued", "retrying", "running", "failed", "finished")


@dataclass(frozen=True)
class JobLine:
    """One job as status shows it."""

    state: str
    job_id: str
    repo: str
    requirement: str
    run_id: str | None = None
    worker: str | None = None
    step: str | None = None
    story: str | None = None
    story_seconds: float | None = None  # how long the current story has been running
    error: str | None = None


def queue_status(
    conn: redis.Redis, queue_name: str, *, finished: int = DEFAULT_FINISHED
) -> dict[str, list[JobLine]]:
    """Jobs per repository, each list in the order of STATES."""
    queue = Queue(queue_name, connection=conn, serializer=JSONSerializer)
    running_on = {
        job_id: w.name
        for w in Worker.all(queue=queue)
        if (job_id := w.get_current_job_id()) is not None
    }
    ids = {
        "queued": queue.get_job_ids(),
        "retrying": _ids(ScheduledJobRegistry, queue),
        # No cleanup: rq's would call abandoned jobs' failure callbacks, whatever they name.
        "running": StartedJobRegistry(queue=queue).get_job_ids(cleanup=False),
        "failed": FailedJobRegistry(queue=queue).get_job_ids(),
        "finished": FinishedJobRegistry(queue=queue).get_job_ids()[-finished:] if finished else [],
    }
    now = time.time()
    by_repo: dict[str, list[JobLine]] = {}
    for state in STATES:
        jobs = Job.fetch_many(ids[state], connection=conn, serializer=JSONSerializer)
        for job in jobs:
            if job is None:  # expired between the two reads
                continue
            line = _line(state, job, running_on.get(job.id), now)
            by_repo.setdefault(line.repo, []).append(line)
    return dict(sorted(by_repo.items()))


def _ids(registry: type[BaseRegistry], queue: Queue) -> list[str]:
    # Through the base class: ScheduledJobRegistry's own __init__ carries no types.
    return registry(queue=queue).get_job_ids()


def _line(state: str, job: Job, worker: str | None, now: float) -> JobLine:
    meta: dict[str, Any] = job.meta or {}
    kwargs: dict[str, Any] = job.kwargs if isinstance(job.kwargs, dict) else {}
    started = meta.get("story_started_at")
    error = None
    if state == "failed":
        result = job.latest_result()
        text = ((result.exc_string if result else None) or "").strip().splitlines()
        error = text[-1][:200] if text else "failed"
    elif state == "retrying" and meta.get("waiting"):  # a run waiting for its installation's
        state, error = "queued", f"waiting {meta['waiting']}"  # slot (bot/jobs/worker_class.py)
    elif state == "retrying":  # RQ keeps no result for an attempt it retries: the worker's
        # ReqdriveWorker kept the error's sentence in the job's meta
        error = str(meta.get("last_error") or "failed; the worker's log says why")
    return JobLine(
        state=state,
        job_id=job.id,
        repo=str(meta.get("repo") or kwargs.get("repo") or "unknown repository"),
        requirement=str(meta.get("requirement") or kwargs.get("requirement") or ""),
        run_id=meta.get("run_id"),
        worker=worker,
        step=meta.get("step"),
        story=meta.get("story"),
        story_seconds=round(now - float(started), 1) if started else None,
        error=error,
    )


def render_queue(by_repo: dict[str, list[JobLine]]) -> list[str]:
    """Lines for the terminal, one repository after another."""
    if not by_repo:
        return ["queue: no jobs"]
    lines = []
    for repo, jobs in by_repo.items():
        counts = ", ".join(f"{sum(j.state == s for j in jobs)} {s}" for s in STATES)
        lines.append(f"{repo}: {counts}")
        lines += [f"  {_describe(job)}" for job in jobs]
    return lines


def _describe(job: JobLine) -> str:
    what = job.requirement or job.run_id or job.job_id
    text = f"{job.state:<8} {what} (job {job.job_id})"
    if job.state == "running":
        where = f" on {job.worker}" if job.worker else ""
        doing = f" story {job.story}" if job.story else (f" step {job.step}" if job.step else "")
        since = f" for {_duration(job.story_seconds)}" if job.story_seconds is not None else ""
        text += f":{doing}{since}{where}"
    if job.error:
        text += f": {job.error}"
    return text


def _duration(seconds: float | None) -> str:
    minutes, secs = divmod(int(seconds or 0), 60)
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def queue_json(by_repo: dict[str, list[JobLine]]) -> dict[str, Sequence[dict[str, Any]]]:
    return {repo: [asdict(j) for j in jobs] for repo, jobs in by_repo.items()}
