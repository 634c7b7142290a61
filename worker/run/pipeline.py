"""The run's story: workspace, configure, baseline, plan, implement, verify, deliver, in order."""

from __future__ import annotations

import logging
import threading
import time

from worker.agents.base import AgentRunner
from worker.confine.disk import check_free_space
from worker.confine.redact import Redactor
from worker.git.cache import RepositoryCache
from worker.git.runner import GitCredentials
from worker.model.state import CheckpointStore, RunResult, RunStep, check_retry
from worker.report.background import BackgroundReporter
from worker.report.protocol import Reporter
from worker.report.run_folder import RunFolder
from worker.run.baseline import measure_baseline
from worker.run.context import RunContext, RunPlaces, configure
from worker.run.delivery import deliver, verify
from worker.run.journal import RunJournal
from worker.run.plan_step import make_plan
from worker.run.prepare import prepare_workspace
from worker.run.run_lock import FileRunLock, RunLock
from worker.run.spec import RunSpec
from worker.run.stories import implement

log = logging.getLogger(__name__)


class Pipeline:
    """Runs one requirement to a verified branch, resuming from its checkpoint if it has one."""

    def __init__(
        self,
        spec: RunSpec,
        *,
        reporter: Reporter,
        checkpoints: CheckpointStore,
        cancel: threading.Event | None = None,
        runner: AgentRunner | None = None,
        lock: RunLock | None = None,
    ) -> None:
        self.spec = spec
        self.reporter = reporter
        self.checkpoints = checkpoints
        self.cancel = cancel or threading.Event()
        self.runner = runner  # instead of the configured one (tests, benchmarks)
        self.redactor = Redactor(spec.secrets)
        self.folder = RunFolder(spec.work_dir / "runs" / spec.run_id, self.redactor)
        # One run of this requirement at a time: the run folder's flock unless the caller
        # gives a lock every machine sees (RedisRunLock).
        self.lock: RunLock = lock or FileRunLock(self.folder)
        self.cache = RepositoryCache(spec.work_dir / "cache", environment=spec.source_env)
        self.places = RunPlaces.of(spec.work_dir, spec.run_id)
        self.started = time.monotonic()

    def run(self) -> RunResult:
        """The whole run; the reporter hears of its ending exactly once, whatever it is."""
        # Reporting goes out on a thread of its own, so GitHub's latency never stalls a story.
        background = BackgroundReporter(self.reporter)
        try:
            return self._reported_run(
                RunJournal(self.spec, self.checkpoints, self.folder, background)
            )
        finally:
            background.close()

    def _reported_run(self, journal: RunJournal) -> RunResult:
        try:
            with self.lock.held():
                result = self._locked_run(journal)
        except Exception as error:
            if not journal.failure_reported:  # refused before the run was ours: nothing to record
                journal.reporter.run_failed(
                    journal.step, self._message(error), error_type=type(error).__name__
                )
            raise
        journal.reporter.run_finished(result)
        return result

    def _locked_run(self, journal: RunJournal) -> RunResult:
        spec = self.spec
        try:
            self.places.scratch.start_over(self.cache.worktrees_dir / spec.run_id)
            check_free_space(spec.work_dir, spec.limits)
            checkpoint = self.checkpoints.load(spec.run_id)
            if spec.retry or spec.retry_failed:  # a bad request leaves the run as it was
                check_retry(checkpoint, spec.run_id, spec.retry)
            journal.checkpoint = checkpoint
            journal.step = RunStep.WORKSPACE
            git = prepare_workspace(spec, self.cache, journal, self._credentials)
            context = configure(
                spec,
                journal=journal,
                redactor=self.redactor,
                folder=self.folder,
                places=self.places,
                cancel=self.cancel,
                git=git,
                runner=self.runner,
                started=self.started,
            )
            result = self._steps(context)
            # The pushed branch is the record now; the worktree would only hold the branch
            # checked out and keep another run (a changed requirement) off it.
            git.remove()
            return result
        except Exception as error:
            self._fail(journal, error)
            raise
        finally:
            self.places.scratch.remove()

    def _steps(self, ctx: RunContext) -> RunResult:
        """The steps after the workspace, in order; each records where the run is."""
        cp, journal = ctx.cp, ctx.journal
        ctx.reporter.run_started(cp.run_id, cp.requirement_source, cp.branch)
        # The baseline comes first: the plan gives each of its failing tests to a story.
        journal.enter(RunStep.BASELINE)
        measure_baseline(ctx)
        journal.enter(RunStep.PLAN)
        make_plan(ctx)
        ctx.reporter.plan_ready(cp.stories)
        if self.spec.plan_only:
            # The engine cancels its own story loop: no story starts, whatever a reporter
            # does or how late it hears.
            self.cancel.set()
        journal.enter(RunStep.IMPLEMENT)
        cp.stop_reason = implement(ctx)
        journal.enter(RunStep.VERIFY)
        final = verify(ctx)
        journal.enter(RunStep.DELIVER)
        return deliver(ctx, final, cp.stop_reason)

    def _credentials(self) -> GitCredentials | None:
        """Fresh credentials from the provider; the redactor learns every value it hands out."""
        if self.spec.credentials is None:
            return None
        credentials = self.spec.credentials()
        for secret in credentials.secrets():
            self.redactor.add_secret(secret)
        return credentials

    def _fail(self, journal: RunJournal, error: Exception) -> None:
        log.warning("run failed", extra={"run_id": self.spec.run_id, "step": str(journal.step)})
        try:
            journal.record_failure(self._message(error))
        finally:  # Redis or the disk failing here must not keep the ending from the reporter
            journal.failure_reported = True
            journal.reporter.run_failed(
                journal.step, self._message(error), error_type=type(error).__name__
            )

    def _message(self, error: Exception) -> str:
        return self.redactor.redact(str(error) or type(error).__name__)
