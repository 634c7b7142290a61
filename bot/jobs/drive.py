"""Run the engine for one RunRecord: lock, heartbeat, cancel flag, pipeline, GitHub reporter."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from redis.exceptions import LockError
from rq import get_current_job

from bot.github.auth import RUN_PERMISSIONS
from bot.github.client import RepoClient
from bot.github.reporter import GitHubReporter
from bot.jobs.lifecycle import forget_run
from bot.jobs.runtime import Runtime
from bot.ops.metrics import MeteredReporter
from bot.stores.ci_waiting import CiWaiting
from bot.stores.feedback_waiting import FeedbackWaiting
from bot.stores.metrics import record_run
from bot.stores.run_locks import RedisRunLock, legacy_lock_held, run_lock_key
from bot.stores.runs import RunRecord
from bot.stores.spend import InstallationBudget
from worker.confine.sandbox import api_hosts, readonly_paths, sandbox_for
from worker.exceptions import RunLockHeld
from worker.git.runner import GitCredentials
from worker.model.state import RunResult
from worker.run.pipeline import Pipeline
from worker.run.spec import Requirement, RunSpec

log = logging.getLogger(__name__)

BEAT_EVERY_S = 10.0
CANCEL_POLL_S = 1.0


class AlreadyRunning(Exception):  # an answer, not a fault
    """Another job holds this requirement's run."""


@contextmanager
def run_lock(rt: Runtime, record: RunRecord) -> Iterator[RedisRunLock]:
    """One job per repository and requirement, on any machine: bot/stores/run_locks.py's lock,
    renewed by the Monitor with each heartbeat and lasting as long, so a killed worker's lock
    lapses no later than the heartbeat whose absence makes the sweeper queue a resume."""
    lock = RedisRunLock(
        rt.conn,
        run_lock_key(record.repo, record.source),
        timeout_s=rt.records.heartbeat_ttl_s,
        renewer=False,
    )
    if legacy_lock_held(rt.conn, record.repo, record.source):
        raise AlreadyRunning(record.run_id)
    # execute() turns everything its run raises into a report, so a RunLockHeld here is the
    # lock refused on entry, never one from inside the run.
    try:
        with lock.held():
            yield lock
    except RunLockHeld:
        raise AlreadyRunning(record.run_id) from None


class Monitor(threading.Thread):
    """Beats the run's heartbeat (and renews its lock) and turns a cancel flag into the cancel
    event."""

    def __init__(
        self,
        rt: Runtime,
        record: RunRecord,
        cancel: threading.Event,
        lock: RedisRunLock | None = None,
    ) -> None:
        super().__init__(name=f"reqdrive-monitor-{record.run_id}", daemon=True)
        self.rt, self.record, self.cancel, self.lock = rt, record, cancel, lock
        self.stopping = threading.Event()
        # Three beats per heartbeat lifetime: one late beat does not make a live run look lost.
        ttl_s = rt.records.heartbeat_ttl_s
        self.beat_every_ticks = max(int(min(BEAT_EVERY_S, ttl_s / 3) / CANCEL_POLL_S), 1)

    def run(self) -> None:
        ticks = 0
        while not self.stopping.wait(CANCEL_POLL_S if ticks else 0):
            try:
                if ticks % self.beat_every_ticks == 0:
                    self._beat()
                if self.rt.records.cancel_requested(self.record.run_id):
                    self.cancel.set()
            except Exception:  # Redis away for a moment: the next tick tries again
                log.warning("heartbeat failed", extra={"run_id": self.record.run_id})
            ticks += 1

    def _beat(self) -> None:
        # The lock first: the heartbeat set after it always outlives it, so when the sweeper
        # sees the heartbeat gone the lock is free for the resume it queues.
        if self.lock is not None:
            try:
                self.lock.renew()
            except LockError:  # lapsed (Redis away longer than its lifetime): say so, go on
                log.error("run lock lost", extra={"run_id": self.record.run_id})
        self.rt.records.beat(self.record.run_id)


def reset_stories(rt: Runtime, run_id: str, story_ids: Sequence[str] | None) -> list[str]:
    """Make stories runnable again (attempts reset; the plan, branch and other stories kept):
    the named ones, or every story that ended without passing. Returns the ids reset."""
    cp = rt.checkpoints.load(run_id)
    if cp is None:
        return []
    known = {s.id for s in cp.stories}
    if story_ids and not all(i in known for i in story_ids):
        return []
    reset = cp.retry(list(story_ids or ()), failed=not story_ids)
    if reset:
        rt.checkpoints.save(cp)
    return reset


def execute(
    rt: Runtime,
    client: RepoClient,
    record: RunRecord,
    *,
    labels: Sequence[str] = (),
    plan_only: bool = False,
    note: str | None = None,
    takeover: bool = False,
) -> RunResult | None:
    """Run the engine for `record` under its lock, reporting on GitHub; None if it failed."""
    cancel = threading.Event()
    job = get_current_job()
    record.job_id = job.id if job else record.job_id
    rt.records.save(record)
    reporter_class = PlanReporter if plan_only else GitHubReporter
    reporter = reporter_class(
        client,
        record,
        rt.records,
        checkpoints=rt.checkpoints,
        labels=labels,
        on_meta=_meta_saver(record),
        fallback_sha=lambda: client.branch_sha(record.base_branch),
    )
    if note:
        reporter.note(note)
    try:
        with run_lock(rt, record) as lock:
            if (gone := rt.records.gone(record.run_id)) is not None:
                # Its pull request closed (or the App was uninstalled) after this job read the
                # record but before it took the lock: the close found no run going and removed
                # its state, so starting now would run a closed pull request's stories again.
                extra = {"run_id": record.run_id, "gone": gone}
                log.info("run not started: its pull request or installation is gone", extra=extra)
                return None
            fresh = not takeover
            return _locked_run(rt, record, reporter, cancel, lock, plan_only, fresh)
    finally:
        # Its pull request closed (or the App uninstalled) while it ran: now that it stopped
        # and freed its lock, its state goes (bot/jobs/lifecycle.py).
        if rt.records.gone(record.run_id) is not None:
            forget_run(rt, record)


def _locked_run(
    rt: Runtime,
    record: RunRecord,
    reporter: GitHubReporter,
    cancel: threading.Event,
    lock: RedisRunLock,
    plan_only: bool,
    new_budget: bool,
) -> RunResult | None:
    monitor = Monitor(rt, record, cancel, lock)
    monitor.start()
    try:
        spec = _spec(rt, record, plan_only=plan_only, new_budget=new_budget)
        metered = MeteredReporter(reporter, rt.conn)
        pipeline = Pipeline(spec, reporter=metered, checkpoints=rt.checkpoints, cancel=cancel)
        return pipeline.run()
    except Exception as error:
        log.exception("run failed", extra={"run_id": record.run_id})
        if "pipeline" not in locals():  # a pipeline reports (and counts) its own failure
            record_run(rt.conn, "failed")
        step = getattr(pipeline, "step", "start") if "pipeline" in locals() else "start"
        # The reporter picks the conclusion from the error's type: a config error is
        # action_required, rq's JobTimeoutException (the job's timeout) timed_out.
        kind = type(error).__name__
        reporter.run_failed(str(step), str(error) or kind, error_type=kind)
        return None
    finally:
        monitor.stopping.set()
        monitor.join()
        rt.records.ended(record.run_id)
        rt.records.clear_cancel(record.run_id)
        _rerun_if_asked(rt, record)
        _feedback_if_waiting(rt, record)
        queue_waiting_ci(rt, record)


def _spec(
    rt: Runtime, record: RunRecord, *, plan_only: bool = False, new_budget: bool = False
) -> RunSpec:
    settings = rt.settings

    def credentials() -> GitCredentials:
        # Cached by auth until shortly before it expires, so each push gets a live token.
        token = rt.app.auth.token(record.installation_id, record.repo, RUN_PERMISSIONS)
        return GitCredentials(token)

    limits = settings.installation_limits(record.installation_id)
    secrets = [credentials().token]  # fails here, before any work, when no token is granted
    for secret in (settings.github_webhook_secret, settings.github_private_key):
        if secret is not None:
            secrets.append(secret.get_secret_value())
    if settings.redis_url:  # the Redactor also hides its password on its own
        secrets.append(settings.redis_url)
    return RunSpec(
        plan_only=plan_only,
        # A person asked for this job: a run taken up again gets its budgetUsd anew. A
        # worker taking over a lost run goes on with the budget it had.
        new_budget=new_budget,
        previous_run=record.previous_run,
        superseded=lambda: rt.reruns.waiting(record.job_id),
        shared_budget=InstallationBudget(
            rt.spend,
            record.installation_id,
            record.run_id,
            limits.monthly_budget_usd,
            source=limits.source,
        ),
        run_id=record.run_id,
        requirement=Requirement(
            text=record.text, source=record.source, slug=record.slug, repo_path=record.repo_path
        ),
        remote_url=record.clone_url,
        work_dir=settings.reqdrive_work_dir,
        base_ref=record.base_branch,
        agent_command=settings.reqdrive_agent_command,
        default_runner=settings.reqdrive_agent,
        source_env=rt.environment,
        gate_path=settings.reqdrive_gate_path,
        bytecode_seed=settings.reqdrive_bytecode_seed,
        credentials=credentials,
        secrets=tuple(secrets),
        limits=settings.limits(),
        sandbox=sandbox_for(
            settings.reqdrive_sandbox,
            readonly_paths(settings.reqdrive_sandbox_readonly),
            network=settings.reqdrive_sandbox_network,
            api_hosts=api_hosts(settings.reqdrive_sandbox_api_hosts),
            limits=settings.limits(),
        ),
    )


def _meta_saver(record: RunRecord) -> Any:
    job = get_current_job()

    def save(values: dict[str, object]) -> None:
        if job is None:
            return
        run = {"run_id": record.run_id, "repo": record.repo, "requirement": record.source}
        job.meta.update({**run, **values})
        job.save_meta()  # type: ignore[no-untyped-call]

    save({})
    return save


def _rerun_if_asked(rt: Runtime, record: RunRecord) -> None:
    """A push edited the requirement while this run ran: run the new text now."""
    if record.job_id is None:
        return
    raw = rt.reruns.take(record.job_id)
    if raw is None:
        return
    _queue_again(rt, "bot.jobs.run_requirement", raw)
    log.info("requirement changed during the run; queued again", extra={"run_id": record.run_id})


def _feedback_if_waiting(rt: Runtime, record: RunRecord) -> None:
    """Reviews or `/reqdrive fix` arrived while this run ran: one feedback run takes them all."""
    raw = FeedbackWaiting(rt.conn).take(record.run_id)
    if raw is None:
        return
    _queue_again(rt, "bot.jobs.address_feedback", raw)
    log.info("feedback waited for the run; queued", extra={"run_id": record.run_id})


def queue_waiting_ci(rt: Runtime, record: RunRecord) -> None:
    """CI completed on the pull request while this run ran: its ci_fix jobs are queued now,
    and each decides on the head the run ended on (an older head's result is dropped)."""
    waiting = CiWaiting(rt.conn).take(record.run_id)
    for raw in waiting:
        _queue_again(rt, "bot.jobs.fix_ci", raw)
    if waiting:
        log.info("ci results waited for the run; queued", extra={"run_id": record.run_id})


def _queue_again(rt: Runtime, function: str, request_json: str) -> None:
    """A job that waited for a run, queued with the jobs' own time limit."""
    rt.queue.enqueue(
        function, kwargs=json.loads(request_json), job_timeout=rt.settings.job_timeout_s
    )


class PlanReporter(GitHubReporter):
    """`/reqdrive plan`: stop once the plan is ready and post it for review."""

    def story_started(self, story: Any, attempt: int, iteration: int) -> None:
        pass

    def run_finished(self, result: RunResult) -> None:
        self.ended = True
        self.progress.stories = list(result.stories)
        self.progress.status = "📋 Plan ready for review; nothing was built yet."
        self.progress.ending = ["Comment `/reqdrive run` to build these stories."]
        self._comment()
        self._save()
