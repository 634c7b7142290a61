"""Only reqdrive's jobs run: whatever else is queued in Redis is refused by the forking worker."""

from __future__ import annotations

import http.server
import json
import logging
import os
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest
from rq import Callback, Queue, Retry
from rq.job import Dependency, Job, JobStatus
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer
from rq.webhook import Webhook

from bot.jobs.job_class import ReqdriveJob
from bot.jobs.worker_class import REFUSED, ReqdriveWorker
from bot.ops.metrics import render
from bot.ops.queue_status import queue_status
from bot.requests import JobKind, RunRequest
from tests.integration.test_jobs import QUEUE, REPO, Scene, scene  # noqa: F401


def leave_marker(job: Job, *_: object) -> None:
    """A callback that shows it ran: it creates the file the job's meta names."""
    Path(job.meta["marker"]).touch()


class Planted:
    """Unpickled, it runs a shell command: what a pickle in a job's arguments would do."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (self.command,))


def help_request(scene: Scene) -> dict[str, Any]:  # noqa: F811
    issue = scene.gh.add_issue(REPO, "Features", "Build.")
    request = RunRequest(
        kind=JobKind.HELP,
        delivery_id="d-help",
        repo=REPO,
        installation_id=7,
        sender="alice",
        requirement=f"ISSUE-{issue}",
        issue_number=issue,
        comment_id=4,
    )
    return request.model_dump(mode="json")


def work(scene: Scene, *, with_scheduler: bool = False) -> None:  # noqa: F811
    """The worker `reqdrive worker` runs: forking, one work horse per job."""
    ReqdriveWorker([QUEUE], connection=scene.conn).work(burst=True, with_scheduler=with_scheduler)


def failure(scene: Scene, job: Job) -> str:  # noqa: F811
    stored = ReqdriveJob.fetch(job.id, connection=scene.conn, serializer=JSONSerializer)
    assert stored.get_status() == JobStatus.FAILED
    result = stored.latest_result()
    assert result is not None and result.exc_string is not None
    return result.exc_string


def test_a_job_naming_os_system_is_refused_logged_and_failed_and_the_worker_goes_on(
    scene: Scene,  # noqa: F811
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    marker = tmp_path / "owned"
    attack = scene.queue.enqueue("os.system", f"touch {marker}")
    real = scene.queue.enqueue("bot.jobs.reply_help", kwargs=help_request(scene))

    with caplog.at_level(logging.WARNING, logger="bot.jobs.worker_class"):
        work(scene)

    assert not marker.exists()
    reason = failure(scene, attack)
    assert "Refused by reqdrive's worker" in reason and "'os.system'" in reason
    [line] = [r for r in caplog.records if r.getMessage() == REFUSED]
    assert line.__dict__["job_id"] == attack.id and line.__dict__["func"] == "'os.system'"
    # The next job, a real one, ran in its work horse.
    real.refresh()  # type: ignore[no-untyped-call]  # rq leaves refresh unannotated
    assert real.get_status() == JobStatus.FINISHED
    assert real.return_value() == {"status": "replied"}


def test_a_refused_name_is_logged_quoted(
    scene: Scene,  # noqa: F811
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    name = "os.system\n2026 INFO bot.jobs: Job OK\x1b]52;c;AAAA\x07"
    scene.queue.enqueue(name, "true")
    with caplog.at_level(logging.WARNING, logger="bot.jobs.worker_class"):
        work(scene)
    [line] = [r for r in caplog.records if r.getMessage() == REFUSED]
    assert line.__dict__["func"] == repr(name)
    assert "\n" not in line.__dict__["func"] and "\x1b" not in line.__dict__["func"]


@pytest.mark.parametrize("hook", ["on_success", "on_failure", "on_stopped"])
def test_a_reqdrive_job_with_a_foreign_callback_is_refused_and_the_callback_never_runs(
    scene: Scene,  # noqa: F811
    tmp_path: Path,
    hook: str,
) -> None:
    marker = tmp_path / "called back"
    job = scene.queue.enqueue(
        "bot.jobs.reply_help",
        kwargs=help_request(scene),
        meta={"marker": str(marker)},
        **{hook: Callback(f"{__name__}.leave_marker")},
    )
    work(scene)
    assert not marker.exists()
    assert f"its {hook} callback '{__name__}.leave_marker'" in failure(scene, job)


def test_an_os_system_callback_is_refused_and_never_imported_by_any_path(scene: Scene) -> None:  # noqa: F811
    job = scene.queue.enqueue(
        "bot.jobs.reply_help",
        kwargs=help_request(scene),
        on_success=Callback("os.system"),
        on_failure=Callback("os.system"),
        on_stopped=Callback("os.system"),
    )
    stored = ReqdriveJob.fetch(job.id, connection=scene.conn, serializer=JSONSerializer)
    # What rq's cleanup of abandoned jobs and the work horse read: nothing to call.
    assert stored.success_callback is None
    assert stored.failure_callback is None
    assert stored.stopped_callback is None
    work(scene)
    assert "its on_success callback 'os.system'" in failure(scene, job)


def test_a_pickle_in_a_job_is_never_unpickled(scene: Scene, tmp_path: Path) -> None:  # noqa: F811
    marker = tmp_path / "unpickled"
    pickled = Queue(QUEUE, connection=scene.conn)  # rq's default serializer: pickle
    job = pickled.enqueue("bot.jobs.reply_help", Planted(f"touch {marker}"))
    work(scene)
    assert not marker.exists()
    assert "its data is not the JSON reqdrive writes" in failure(scene, job)


def test_a_job_depending_on_a_foreign_job_is_refused(scene: Scene, tmp_path: Path) -> None:  # noqa: F811
    marker = tmp_path / "owned"
    first = scene.queue.enqueue("os.system", f"touch {marker}")
    second = scene.queue.enqueue(
        "bot.jobs.reply_help",
        kwargs=help_request(scene),
        depends_on=Dependency(jobs=[first], allow_failure=True),
    )
    work(scene)
    assert not marker.exists()
    assert f"its dependency '{first.id}' runs 'os.system'" in failure(scene, second)


def test_scheduled_and_retried_foreign_jobs_go_through_the_same_check(
    scene: Scene,  # noqa: F811
    tmp_path: Path,
) -> None:
    marker = tmp_path / "owned"
    past = datetime.now(UTC) - timedelta(seconds=1)
    scheduled = scene.queue.enqueue_at(past, "os.system", f"touch {marker}")
    retried = scene.queue.enqueue("os.system", f"touch {marker}", retry=Retry(3))
    work(scene, with_scheduler=True)
    assert not marker.exists()
    assert "'os.system'" in failure(scene, scheduled)
    # Refused once, not retried: it would be refused again.
    assert "'os.system'" in failure(scene, retried)


def test_the_job_class_alone_refuses_a_foreign_function(scene: Scene, tmp_path: Path) -> None:  # noqa: F811
    # Any rq worker given ReqdriveJob (SimpleWorker here) cannot import another function.
    marker = tmp_path / "owned"
    job = scene.queue.enqueue("os.system", f"touch {marker}")
    stored = ReqdriveJob.fetch(job.id, connection=scene.conn, serializer=JSONSerializer)
    with pytest.raises(Exception, match=r"names 'os\.system', not one of reqdrive's"):
        stored.perform()
    assert not marker.exists()


@pytest.mark.parametrize("reader", ["metrics", "status"])
def test_reading_the_queue_never_calls_an_abandoned_jobs_callback(
    scene: Scene,  # noqa: F811
    tmp_path: Path,
    reader: str,
) -> None:
    # An abandoned job (started, its lease long expired) whose failure callback leaves a mark:
    # rq's cleanup of the started registry would call it in the web process or `status`.
    marker = tmp_path / "called back"
    job = scene.queue.enqueue(
        "bot.jobs.reply_help",
        meta={"marker": str(marker)},
        on_failure=Callback(f"{__name__}.leave_marker"),
    )
    scene.queue.remove(job.id)
    job.set_status(JobStatus.STARTED)
    # As rq records an execution: `<job id>:<execution id>`, scored with its deadline (1970).
    scene.conn.zadd(StartedJobRegistry(queue=scene.queue).key, {f"{job.id}:lost": 1})

    if reader == "metrics":
        assert b'reqdrive_queue_jobs{state="started"} 1.0' in render(scene.conn, QUEUE)
    else:
        [line] = queue_status(scene.conn, QUEUE)["unknown repository"]
        assert line.state == "running"
    assert not marker.exists()


def test_the_worker_reads_json_through_reqdrive_s_job_class_whatever_it_is_given(
    scene: Scene,  # noqa: F811
) -> None:
    # As `rq worker -w bot.jobs.worker_class.ReqdriveWorker` builds it: its own pickle queues.
    given = Queue(QUEUE, connection=scene.conn)
    worker = ReqdriveWorker([given], connection=scene.conn, serializer="pickle", job_class=Job)
    assert worker.serializer is JSONSerializer and worker.job_class is ReqdriveJob
    [queue] = worker.queues
    assert queue.serializer is JSONSerializer and queue.job_class is ReqdriveJob


class Listener(http.server.BaseHTTPRequestHandler):
    """Counts the requests a webhook would send."""

    received: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self._count()

    def do_POST(self) -> None:
        self._count()

    def _count(self) -> None:
        Listener.received.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        del format, args


def test_a_job_asking_for_webhooks_is_refused_and_nothing_is_sent(scene: Scene) -> None:  # noqa: F811
    Listener.received = []
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Listener) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        hooks = [Webhook(url, "failed", method="POST"), Webhook(url, "finished")]
        job = scene.queue.enqueue("bot.jobs.reply_help", kwargs=help_request(scene), webhooks=hooks)
        work(scene)
        server.shutdown()
    assert "it asks for webhooks" in failure(scene, job)
    assert Listener.received == []


def test_a_job_hash_rq_cannot_parse_is_refused_and_the_worker_goes_on(scene: Scene) -> None:  # noqa: F811
    job = scene.queue.enqueue("bot.jobs.reply_help", kwargs=help_request(scene))
    scene.conn.hset(job.key, "dependency_ids", json.dumps(["not an id!"]))  # by hand, in Redis
    real = scene.queue.enqueue("bot.jobs.reply_help", kwargs=help_request(scene))
    work(scene)
    assert "it could not be read" in failure(scene, job)
    real.refresh()  # type: ignore[no-untyped-call]  # rq leaves refresh unannotated
    assert real.get_status() == JobStatus.FINISHED
