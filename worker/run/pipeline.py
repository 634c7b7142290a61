"""The engine: one run's steps in order (workspace, plan, baseline, stories, verify, deliver)."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from worker.agents.base import AgentCall, AgentOutcome, AgentRunner, AgentSettings
from worker.agents.registry import make_runner
from worker.confine.redact import Redactor
from worker.confine.sandbox import Sandbox
from worker.exceptions import PreflightError, RunCancelled
from worker.git.cache import RepositoryCache
from worker.git.runner import CredentialsProvider, GitCredentials, head_sha, run_git
from worker.git.scope import collect_changes, has_staged_changes, restore_tree
from worker.git.worktree import Worktree
from worker.model.prd import Prd, Story, parse_prd
from worker.model.repo_config import GatesMode, RepoConfig, read_repo_config
from worker.model.run_ids import check_run_id
from worker.model.state import (
    AttemptOutcome,
    AttemptRecord,
    Checkpoint,
    CheckpointStore,
    RunResult,
    RunStatus,
    RunStep,
    StopReason,
    StoryRecord,
    StoryState,
    check_retry,
    select_next_story,
)
from worker.plan.planning import Planner, check_test_claims
from worker.plan.prompting import STORY_TEMPLATE, PromptRenderer, load_overrides
from worker.report.background import BackgroundReporter
from worker.report.inert_text import neutralize
from worker.report.protocol import Reporter
from worker.report.story_states import count_stories
from worker.run.delivery import run_result, write_delivery
from worker.run.resume import (
    check_requirement,
    reconcile,
    stop_leftovers,
    story_trailer,
    unproven_stories,
)
from worker.run.run_folder import (
    PRD_JSON,
    RUN_JSON,
    RunFolder,
)
from worker.run.run_lock import FileRunLock, RunLock
from worker.verdict.gates import GateResult, GateSpec, gate_environment, gate_specs, run_gates
from worker.verdict.judging import (
    KEPT,
    MISSING,
    Judgement,
    Verdict,
    added_tests,
    fail_fast_on,
    feedback,
    judge_story,
    reference_gates,
    story_state,
    tests_by_id,
    unclaimed,
)
from worker.verdict.secret_scan import SecretScanner
from worker.verdict.tampering import (
    changed_files,
    files_with_tests,
    gate_inputs,
    restore_paths,
    rewritten_tests,
)

log = logging.getLogger(__name__)

DEFAULT_AGENT_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class Requirement:
    """What to build: the text (data, never a template) and where it came from."""

    text: str
    source: str  # "docs/requirements/REQ-001-x.md", "ISSUE-3", ...
    slug: str  # the branch is reqdrive/<slug>
    repo_path: str | None = None  # the file in the repository, which the agent may not edit

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8", errors="surrogatepass")).hexdigest()


@dataclass(frozen=True)
class RunSpec:
    """One run's inputs: plain data, so a job and the command line build it alike."""

    run_id: str
    requirement: Requirement
    remote_url: str
    work_dir: Path
    base_ref: str | None = None
    agent_runner: str | None = None  # overrides the repository's agent.runner
    agent_command: str | None = None  # the command runner's template
    # Fresh credentials before every fetch and push (None: the remote needs none).
    credentials: CredentialsProvider | None = None
    secrets: tuple[str, ...] = ()
    # The environment the agent's allowlisted variables (PATH, locale, its API key), git's
    # (PATH, proxies, CA files, the SSH agent) and the gates' PATH come from: given by the
    # caller, never read here.
    source_env: Mapping[str, str] = field(default_factory=dict)
    # The runner when neither agent_runner nor the repository's config names one.
    default_runner: str = "claude"
    # PATH for the gates (the operator's interpreter and tools first); default source_env's.
    gate_path: str | None = None
    # Where agent calls and gates run (REQDRIVE_SANDBOX); None runs them unconfined.
    sandbox: Sandbox | None = None
    # Stories to run again from the existing checkpoint (attempts reset, branch kept), and
    # whether every story that ended without passing is run again too.
    retry: tuple[str, ...] = ()
    retry_failed: bool = False
    # A reviewed prd.json (`reqdrive run --plan FILE`): used instead of asking the agent, and
    # validated like an agent-written one.
    plan_text: str | None = None
    # Stop once the plan is made (`reqdrive plan`, `/reqdrive plan`): the engine cancels its
    # own story loop, so no story starts whatever a reporter does or how late it hears.
    plan_only: bool = False
    # Asked before each story: a newer text of the requirement waits to run (a push edited
    # it), so the loop stops after the story it is on, which is never cut short.
    superseded: Callable[[], bool] | None = None

    def __post_init__(self) -> None:
        # The run id names folders under the work dir: refused before any of them is made.
        check_run_id(self.run_id)


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
        self._given_runner = runner  # instead of the configured one (tests, benchmarks)
        self.given_reporter = reporter
        self.reporter: Reporter = reporter  # the background one while run() runs
        self.checkpoints = checkpoints
        self.cancel = cancel or threading.Event()
        self.redactor = Redactor(spec.secrets)
        self.folder = RunFolder(spec.work_dir / "runs" / spec.run_id, self.redactor)
        # One run of this requirement at a time: the run folder's flock unless the caller
        # gives a lock every machine sees (RedisRunLock).
        self.lock: RunLock = lock or FileRunLock(self.folder)
        self.cache = RepositoryCache(spec.work_dir / "cache", environment=spec.source_env)
        self.home = spec.work_dir / "homes" / spec.run_id
        # The gates' HOME: beside the agent's, never inside it (see _fresh_gate_home).
        self.gate_home = spec.work_dir / "gatehomes" / spec.run_id
        # Outside the run folder, so the agent never reaches the checkpoint, logs or PRD:
        # where planning leaves prd.json, and the agent's own git folder.
        self.handoff = spec.work_dir / "handoff" / spec.run_id
        self.git_view = spec.work_dir / "gitviews" / spec.run_id
        self.started = time.monotonic()

    @property
    def cp(self) -> Checkpoint:
        if self.checkpoint is None:
            raise RuntimeError("the run has no checkpoint before its workspace is ready")
        return self.checkpoint

    def _prd(self) -> Prd:
        if self.cp.prd is None:
            raise RuntimeError("the run has no plan yet")
        return self.cp.prd

    # the run ------------------------------------------------------------------------------

    def run(self) -> RunResult:
        """The whole run; the reporter hears of its ending exactly once, whatever it is."""
        self.checkpoint: Checkpoint | None = None
        self.step = RunStep.PREFLIGHT
        background = BackgroundReporter(self.given_reporter)
        self.reporter = background
        try:
            result = self._reported_run()
        finally:
            background.close()
            self.reporter = self.given_reporter
        return result

    def _reported_run(self) -> RunResult:
        self.failure_reported = False
        try:
            with self.lock.held():
                result = self._locked_run()
        except Exception as error:
            if not self.failure_reported:  # refused before the run was ours: nothing to record
                self.reporter.run_failed(
                    self.step, self._message(error), error_type=type(error).__name__
                )
            raise
        self.reporter.run_finished(result)
        return result

    def _locked_run(self) -> RunResult:
        try:
            checkpoint = self.checkpoints.load(self.spec.run_id)
            if self.spec.retry or self.spec.retry_failed:  # a bad request leaves the run as it was
                check_retry(checkpoint, self.spec.run_id, self.spec.retry)
            self.checkpoint = checkpoint
            self.step = RunStep.WORKSPACE
            result = self._run()
            # The pushed branch is the record now; the worktree would only hold the branch
            # checked out and keep another run (a changed requirement) off it.
            self.cache.remove(self.worktree)
            return result
        except Exception as error:
            self._fail(error)
            raise

    def _run(self) -> RunResult:
        self.worktree = self._workspace()
        self._configure()
        cp = self.cp
        self.reporter.run_started(cp.run_id, cp.requirement_source, cp.branch)
        # The baseline comes first: the plan gives each of its failing tests to a story.
        self._enter(RunStep.BASELINE)
        if cp.baseline is None:
            baseline = self._baseline()
            # Gates stopped part-way measured nothing: a resumed run measures them again.
            cp.baseline = None if self.cancel.is_set() else baseline
        if self.cancel.is_set():
            raise RunCancelled(
                "the run was cancelled while measuring the base commit; no plan was made"
            )
        self._enter(RunStep.PLAN)
        if cp.prd is None or self._replaces_plan():
            self._plan()
        self.reporter.plan_ready(cp.stories)
        if self.spec.plan_only:
            self.cancel.set()
        self._enter(RunStep.IMPLEMENT)
        cp.stop_reason = self._implement()
        self._enter(RunStep.VERIFY)
        final = self._verify()
        self._enter(RunStep.DELIVER)
        return self._deliver(final, cp.stop_reason)

    def _enter(self, step: RunStep) -> None:
        """Record the step, so a failure (or a resumed run) can say where the run was."""
        self.step = step
        self._save(step=step)
        self._write_run_json()
        self.reporter.step_started(step)

    def _credentials(self) -> GitCredentials | None:
        """Fresh credentials from the provider; the redactor learns every value it hands out."""
        if self.spec.credentials is None:
            return None
        credentials = self.spec.credentials()
        for secret in credentials.secrets():
            self.redactor.add_secret(secret)
        return credentials

    def _fail(self, error: Exception) -> None:
        log.warning("run failed", extra={"run_id": self.spec.run_id, "step": str(self.step)})
        message = self._message(error)
        try:
            if self.checkpoint is not None:
                self.checkpoint.status = RunStatus.FAILED
                self.checkpoint.error = message
                self.checkpoint.step = self.step
                self.checkpoints.save(self.checkpoint)
            self._write_run_json(error=message)
        finally:  # Redis or the disk failing here must not keep the ending from the reporter
            self.failure_reported = True
            self.reporter.run_failed(self.step, message, error_type=type(error).__name__)

    def _message(self, error: Exception) -> str:
        return self.redactor.redact(str(error) or type(error).__name__)

    def _save(self, *, step: RunStep | None = None) -> None:
        cp = self.cp
        if step is not None:
            cp.step = step
        self.checkpoints.save(cp)

    def _write_run_json(self, *, error: str | None = None) -> None:
        cp = self.checkpoint
        data: dict[str, object] = {
            "run_id": self.spec.run_id,
            "requirement": self.spec.requirement.source,
            "pid": os.getpid(),
            "status": str(RunStatus.FAILED if error else (cp.status if cp else RunStatus.RUNNING)),
            "step": str(self.step),
        }
        if cp is not None:
            data |= {
                "branch": cp.branch,
                "base_sha": cp.base_sha,
                "head_sha": cp.head_sha,
                "iteration": cp.iteration,
                "cost_usd": round(cp.cost_usd, 4),
                "stop_reason": cp.stop_reason and str(cp.stop_reason),
            }
        if error:
            data["error"] = error
        self.folder.write_json(RUN_JSON, data)

    # workspace ----------------------------------------------------------------------------

    def _workspace(self) -> Worktree:
        spec, cp = self.spec, self.checkpoint
        if cp is not None:
            self._before_resume(cp)
        worktree = self.cache.prepare(
            spec.remote_url,
            branch=cp.branch if cp else f"reqdrive/{spec.requirement.slug}",
            base_ref=cp.base_ref if cp else spec.base_ref,
            run_id=spec.run_id,
            credentials=self._credentials(),
        )
        self.worktree = worktree
        if cp is None:
            self.checkpoint = self._first_checkpoint(worktree)
            self.checkpoints.save(self.checkpoint)
        else:
            cp.status, cp.error = RunStatus.RUNNING, None
            if reconcile(worktree.path, cp):
                self._push()
            self._reverify(cp)
            self._retry(cp)
        return worktree

    def _retry(self, cp: Checkpoint) -> None:
        reset = cp.retry(self.spec.retry, failed=self.spec.retry_failed)
        if not reset:
            return
        log.info("stories retried", extra={"run_id": cp.run_id, "stories": reset})
        self.folder.append_progress(
            "retry: " + ", ".join(reset) + " pending again (earlier attempts kept, not counted)"
        )
        self.checkpoints.save(cp)

    def _reverify(self, cp: Checkpoint) -> None:
        """Stories the checkpoint calls done without their commit on the branch are done again."""
        unproven = unproven_stories(self.worktree.path, cp)
        if not unproven:
            return
        log.warning("checkpoint claims unproven", extra={"run_id": cp.run_id, "stories": unproven})
        cp.stop_reason = None
        self.folder.append_progress(
            "resume: the checkpoint calls " + ", ".join(unproven) + " done, but the branch "
            "holds no commit for them; they are pending again"
        )
        self.checkpoints.save(cp)

    def _before_resume(self, cp: Checkpoint) -> None:
        check_requirement(cp, self.spec.requirement.sha256)
        stopped = stop_leftovers(self.cache.worktrees_dir / self.spec.run_id)
        if stopped:
            log.warning(
                "stopped processes of an interrupted run",
                extra={"run_id": self.spec.run_id, "pids": stopped},
            )

    def _first_checkpoint(self, worktree: Worktree) -> Checkpoint:
        start = head_sha(worktree.path)
        return Checkpoint(
            run_id=self.spec.run_id,
            requirement_source=self.spec.requirement.source,
            requirement_sha256=self.spec.requirement.sha256,
            branch=worktree.branch,
            base_ref=worktree.base_ref,
            base_sha=worktree.base_sha,
            head_sha=start,
            pushed_sha=start if worktree.resumed else None,
            start_sha=start if worktree.resumed else None,
        )

    def _configure(self) -> None:
        cp = self.cp
        config, self.config_path = read_repo_config(self.worktree.path, cp.base_sha)
        self.config: RepoConfig = config
        self.renderer = PromptRenderer(
            load_overrides(self.worktree.path, cp.base_sha, config.prompts),
            folder=config.prompts,
        )
        settings = AgentSettings(
            runner=self.spec.agent_runner or config.agent.runner or self.spec.default_runner,
            model=config.agent_model,
            timeout_s=config.agent.timeout or DEFAULT_AGENT_TIMEOUT_S,
            command=self.spec.agent_command,
        )
        self.agent_settings = settings
        self.runner: AgentRunner = self._given_runner or make_runner(
            settings, redactor=self.redactor, source_env=self.spec.source_env
        )
        self.home.mkdir(parents=True, exist_ok=True)
        # The checks get no credential, the agent's API key included, and the operator's PATH.
        self.gate_env = gate_environment(
            self.gate_home, self.spec.source_env, path=self.spec.gate_path
        )
        self.gates: list[GateSpec] = gate_specs(
            config.test_command, config.lint_command, config.gates
        )
        self.forbidden = config.forbidden_globs(self.spec.requirement.repo_path, self.config_path)

    # plan ---------------------------------------------------------------------------------

    def _replaces_plan(self) -> bool:
        """A reviewed plan replaces the run's own only before any story was tried."""
        if self.spec.plan_text is None:
            return False
        if any(s.attempts for s in self.cp.stories):
            raise PreflightError(
                f"run {self.spec.run_id} has already worked on its stories; start a new run "
                "with --run-id to use this plan"
            )
        return True

    def _reviewed_plan(self, text: str) -> Prd:
        prd = parse_prd(text)
        check_test_claims(prd, tests_by_id(self.cp.baseline or []))
        self.folder.append_progress("plan: read from the reviewed plan given with --plan")
        return prd

    def _plan(self) -> None:
        cp = self.cp
        if self.spec.plan_text is not None:
            self._adopt_plan(self._reviewed_plan(self.spec.plan_text))
            return
        planner = Planner(
            worktree=self.worktree.path,
            handoff=self.handoff,
            branch=cp.branch,
            folder=self.folder,
            renderer=self.renderer,
            call_agent=self._call_agent,
            timeout_s=self.agent_settings.timeout_s,
            redactor=self.redactor,
            cancel=self.cancel,
            baseline_tests=tests_by_id(cp.baseline or []),
        )
        self._adopt_plan(planner.plan(self._plan_values(), on_attempt=self._planning_attempt))

    def _adopt_plan(self, prd: Prd) -> None:
        cp = self.cp
        cp.prd = prd
        cp.stories = [StoryRecord.model_validate(s.model_dump()) for s in prd.user_stories]
        self._write_prd()
        self.folder.append_progress(
            f"plan: {count_stories(len(prd.user_stories))} "
            + ", ".join(s.id for s in prd.user_stories)
        )
        left = unclaimed(cp.stories, cp.baseline or [])
        if left:
            self.folder.append_progress(
                f"no story claims {len(left)} failing tests; they stay final checks: "
                + ", ".join(left[:20])
                + (" ..." if len(left) > 20 else "")
            )
        self._save()

    def _plan_values(self) -> dict[str, object]:
        return {
            "requirement": self.spec.requirement.text,
            "source": self.spec.requirement.source,
            "project": self.config.project_name or "",
        }

    def _planning_attempt(self, number: int) -> None:
        self.cp.plan_attempts = number
        self._save()

    def _call_agent(self, label: str | int, prompt: str) -> AgentOutcome:
        cp = self.cp
        prompt_path = self.folder.write_text(self.folder.prompt_path(label).name, prompt)
        sandbox = self._confinement()
        call = AgentCall(
            prompt_file=prompt_path,
            cwd=self.worktree.path,
            run_dir=self.handoff,
            home_dir=self.home,
            log_path=self.folder.log_path(label),
            timeout_s=self.agent_settings.timeout_s,
            model=self.agent_settings.model,
            sandbox=sandbox and sandbox.bind(readonly=[prompt_path]),
        )
        outcome = self.runner.run(call, cancel=self.cancel)
        self.cache.secure(self.worktree)  # before any git of ours reads what it may have planted
        self.folder.sweep()
        cp.cost_usd += outcome.cost_usd or 0.0
        return outcome

    def _confinement(self) -> Sandbox | None:
        """The sandbox for the next agent call: the worktree, the run's HOME, the hand-over
        folder (emptied) and a git folder of its own; None when unconfined."""
        self.handoff.mkdir(parents=True, exist_ok=True)
        for entry in self.handoff.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        if self.spec.sandbox is None:
            return None
        view = self.cache.agent_view(self.worktree, self.git_view)
        return self.spec.sandbox.bind(
            writable=[self.home, self.handoff, view.git_dir],
            readonly=[view.objects],
            shadows=[(view.git_file, self.worktree.path / ".git")],
        )

    def _gate_confinement(self) -> Sandbox | None:
        """The sandbox for a gate run: the worktree, the gates' own HOME (emptied) and a git
        folder of its own; not the agent's HOME nor the hand-over folder."""
        self._fresh_gate_home()
        if self.spec.sandbox is None:
            return None
        view = self.cache.agent_view(self.worktree, self.git_view)
        return self.spec.sandbox.bind(
            writable=[self.gate_home, view.git_dir],
            readonly=[view.objects],
            shadows=[(view.git_file, self.worktree.path / ".git")],
        )

    def _fresh_gate_home(self) -> None:
        """An empty HOME (and TMPDIR) for every gate run. Tools read their user configuration
        there (Python's user site-packages, whose `.pth` lines run at start; `~/.npmrc`'s
        script-shell; `~/.gitconfig`): left by the agent or by the code an earlier gate ran,
        it would change the verdict without showing in the story's diff."""
        if self.gate_home.is_symlink():
            self.gate_home.unlink()
        shutil.rmtree(self.gate_home, ignore_errors=True)  # never follows links inside
        Path(self.gate_env["TMPDIR"]).mkdir(parents=True, exist_ok=True)

    # baseline and gates -------------------------------------------------------------------

    def _baseline(self) -> list[GateResult]:
        """The gates where the stories start: what "no worse than before" means for every story.

        That is the base commit, or the branch's head when an earlier run of this requirement
        (before its text was edited) left commits there: the stories build on that head, so
        its tests are nobody's new tests and must not be judged as a story's."""
        if not self.gates:
            return []
        results = self._run_gates("baseline", fail_fast=False)
        if not self.cancel.is_set():  # stopped gates say nothing about the starting commit
            on_base = head_sha(self.worktree.path) == self.cp.base_sha
            self.folder.append_progress(
                f"baseline on {'the base commit' if on_base else 'the branch head'}: "
                + ", ".join(f"{g.name} {'passes' if g.passed else 'FAILS'}" for g in results)
            )
        return results

    def _run_gates(self, label: str, *, fail_fast: bool) -> list[GateResult]:
        if not self.gates:
            return []
        results = run_gates(
            self.gates,
            cwd=self.worktree.path,
            env=self.gate_env,
            output_dir=self.folder.path,
            label=label,
            redactor=self.redactor,
            parallel=self.config.gates_mode is GatesMode.PARALLEL,
            fail_fast=fail_fast,
            cancel=self.cancel,
            sandbox=self._gate_confinement(),
        )
        self.cache.secure(self.worktree)  # the gates ran the agent's code
        # Whatever the gates wrote (caches, reports, a formatter's rewrites) is not the story's.
        run_git(["reset", "--hard", "--quiet"], cwd=self.worktree.path)
        run_git(["clean", "-ffd", "--quiet"], cwd=self.worktree.path)
        return results

    # implement ----------------------------------------------------------------------------

    def _implement(self) -> StopReason:
        cp = self.cp
        while True:
            if self.cancel.is_set():
                return StopReason.CANCELLED
            if self.spec.superseded is not None and self.spec.superseded():
                return StopReason.SUPERSEDED
            story = self._next_story()
            if story is None:
                if all(s.state is StoryState.PASSED for s in cp.stories):
                    return StopReason.ALL_STORIES_PASSED
                return StopReason.STORIES_SETTLED
            if cp.iteration - cp.retry_from >= self.config.max_iterations:
                return StopReason.MAX_ITERATIONS
            budget = self.config.budget_usd
            if budget is not None and cp.cost_usd >= budget:
                return StopReason.BUDGET_SPENT
            self._story(story)

    def _next_story(self) -> StoryRecord | None:
        return select_next_story(self.cp.stories, max_story_retries=self.config.max_story_retries)

    def _story(self, record: StoryRecord) -> None:
        cp = self.cp
        cp.iteration += 1
        iteration, number = cp.iteration, len(record.attempts) + 1
        self._save()  # a kill from here on shows which iteration was interrupted
        self.reporter.story_started(record, number, iteration)
        started = time.monotonic()
        attempt = self._attempt(record, iteration, number)
        attempt.duration_s = round(time.monotonic() - started, 3)
        self.folder.append_progress(_progress_line(record, attempt))
        if attempt.outcome is AttemptOutcome.CANCELLED:
            # Not the agent's failure: it does not use up one of the story's attempts.
            self._save()
            self.reporter.story_finished(record, attempt)
            return
        record.attempts.append(attempt)
        record.state = story_state(attempt.outcome, number, self.config.max_story_retries)
        if attempt.outcome in KEPT:
            record.commit = attempt.commit
            cp.head_sha = attempt.commit or cp.head_sha
        self._save()
        if cp.head_sha != cp.pushed_sha and cp.head_sha != cp.base_sha:
            self._push()
        self._write_prd()
        self._write_run_json()
        self.reporter.story_finished(record, attempt)

    def _attempt(self, record: StoryRecord, iteration: int, number: int) -> AttemptRecord:
        cp = self.cp
        pre = cp.head_sha
        self._restore_tree(pre)
        prompt = self.renderer.render(STORY_TEMPLATE, **self._story_values(record, number))
        outcome = self._call_agent(iteration, prompt)
        base: dict[str, Any] = {
            "iteration": iteration,
            "attempt": number,
            "cost_usd": outcome.cost_usd,
            "agent_exit_code": outcome.exit_code,
            "refused_tools": list(outcome.denials),
        }
        if self.cancel.is_set():
            self._restore_tree(pre)
            return AttemptRecord(outcome=AttemptOutcome.CANCELLED, reason="cancelled", **base)
        if outcome.timed_out:
            self._restore_tree(pre)
            why = f"the agent did not finish within {self.agent_settings.timeout_s:g}s"
            return AttemptRecord(outcome=AttemptOutcome.AGENT_TIMED_OUT, reason=why, **base)
        forbidden = self._collect_changes(pre)
        if not has_staged_changes(self.worktree.path, pre):
            self._restore_tree(pre)
            why = "no changes" + (" outside forbidden paths" if forbidden else "")
            if outcome.error:
                why += f" (agent: {outcome.error})"
            return AttemptRecord(
                outcome=AttemptOutcome.NO_CHANGES, reason=why, forbidden_writes=forbidden, **base
            )
        refused = SecretScanner(self.redactor).scan_change(self.worktree.path, pre)
        if refused:
            self._restore_tree(pre)
            why = (
                "the change holds a secret value or a file that cannot be scanned ("
                + "; ".join(str(f) for f in refused)
                + "); nothing was committed"
            )
            return AttemptRecord(
                outcome=AttemptOutcome.CREDENTIAL_IN_CHANGE,
                reason=why,
                forbidden_writes=forbidden,
                **base,
            )
        return self._check(record, pre, forbidden, base)

    def _check(
        self, record: StoryRecord, pre: str, forbidden: list[str], base: dict[str, Any]
    ) -> AttemptRecord:
        """Commit what the agent left, run the gates on it, keep the commit if they allow."""
        cp, path, iteration = self.cp, self.worktree.path, base["iteration"]
        self.cache.check_worktree(self.worktree)  # its own repository and branch, nothing else
        message = ["-m", _story_subject(record), "-m", story_trailer(record.id)]
        run_git(["commit", "--quiet", "--no-verify", *message], cwd=path)
        commit = head_sha(path)
        label = self.folder.gates_label(iteration)
        gates = self._run_gates(label, fail_fast=fail_fast_on(cp.baseline or []))
        if self.cancel.is_set():  # the gates were stopped part-way: no verdict
            self._restore_tree(pre)
            return AttemptRecord(outcome=AttemptOutcome.CANCELLED, reason="cancelled", **base)
        reference = reference_gates(cp.stories, cp.baseline or [])
        changed = changed_files(path, pre, commit)
        added = added_tests(reference, gates)
        owned = {*record.tests, *added}
        before = tests_by_id(reference) or {}
        # Any test that ran before (passing, or failing for another story) must not be
        # rewritten to suit this one.
        existing = [t for t, status in before.items() if status != "skipped"]
        rewritten = rewritten_tests(path, pre, commit, changed, {*record.tests, *existing})
        judged = self._judge(reference, gates, owned=owned, rewritten=rewritten)
        if judged.verdict is Verdict.PASSED and added:
            # A test the story added must fail without the story's change, or it proves nothing.
            at_parent = self._added_tests_at_parent(pre, commit, changed, added, label)
            judged = self._judge(
                reference, gates, owned=owned, rewritten=rewritten, at_parent=at_parent
            )
        else:
            at_parent = {}
        gate_changes = gate_inputs(path, pre, commit, changed, self.gates)
        outcome, why = _OUTCOMES[judged.verdict], judged.reason
        if gate_changes and judged.verdict is not Verdict.FAILED:
            # Would it pass with the gates as they were? If not, its pass rests on the change.
            restore_paths(path, pre, gate_changes)
            restored = self._run_gates(f"{label}.restored", fail_fast=False)
            again = self._judge(
                reference, restored, owned=owned, rewritten=rewritten, at_parent=at_parent
            )
            if again.verdict.worse_than(judged.verdict):
                outcome = AttemptOutcome.NEEDS_REVIEW
                why = (
                    f"passes only with its change to what a gate runs "
                    f"({', '.join(gate_changes)}); with the gates as they were: "
                    f"{again.reason or again.verdict}"
                )
        elif gate_changes:
            why += f"; it changed what a gate runs: {', '.join(gate_changes)}"
        record_fields = {
            "reason": why,
            "gates": gates,
            "tests": judged.tests,
            "gate_changes": gate_changes,
            "forbidden_writes": forbidden,
            **base,
        }
        if outcome is AttemptOutcome.GATES_FAILED:
            self._keep_patch(pre, commit, iteration)
            self._restore_tree(pre)
            return AttemptRecord(outcome=outcome, **record_fields)
        return AttemptRecord(outcome=outcome, commit=commit, **record_fields)

    def _judge(
        self,
        reference: list[GateResult],
        results: list[GateResult],
        **tests: Any,
    ) -> Judgement:
        return judge_story(reference, results, [g.name for g in self.gates], **tests)

    def _added_tests_at_parent(
        self, pre: str, commit: str, changed: list[str], added: list[str], label: str
    ) -> dict[str, str]:
        """The story's new tests run on its parent commit: only its test files applied."""
        cp, path = self.cp, self.worktree.path
        present = set(run_git(["ls-tree", "-r", "--name-only", "-z", commit], cwd=path).split("\0"))
        files = [f for f in files_with_tests(changed, added) if f in present]
        run_git(["checkout", "--quiet", "--detach", pre], cwd=path)
        try:
            if files:
                run_git(["checkout", "--quiet", commit, "--", *files], cwd=path)
            results = self._run_gates(f"{label}.parent", fail_fast=False)
        finally:
            run_git(["checkout", "--quiet", "--force", cp.branch], cwd=path)
        tests = tests_by_id(results) or {}
        # A module that cannot even be imported without the change is reported by pytest as
        # one failed case named after the module: its tests failed there.
        return {t: str(tests.get(t) or tests.get(t.split("::", 1)[0]) or MISSING) for t in added}

    def _story_values(self, record: StoryRecord, number: int) -> dict[str, object]:
        return {
            "story": {
                "id": record.id,
                "title": record.title,
                "description": record.description,
                "acceptance_criteria": list(record.acceptance_criteria),
                "priority": record.priority,
                "notes": record.notes,
                "tests": list(record.tests),
            },
            "attempt": number,
            "max_attempts": self.config.max_story_retries,
            "feedback": (feedback(record.attempts[-1]) if record.attempts else None) or "",
            "progress": self.folder.progress(),
            "requirement": self.spec.requirement.text,
            "source": self.spec.requirement.source,
            "gates": ", ".join(f"{g.name}: `{g.command}`" for g in self.gates) or "none configured",
            "forbidden_paths": self.forbidden,
        }

    def _collect_changes(self, pre: str) -> list[str]:
        touched = collect_changes(self.worktree.path, self.cp.branch, pre, self.forbidden)
        # Recorded in the checkpoint and the log: an agent-made file name may hold a secret.
        touched = [self.redactor.redact(name) for name in touched]
        if touched:
            log.warning(
                "forbidden paths reverted", extra={"run_id": self.spec.run_id, "paths": touched}
            )
        return touched

    def _keep_patch(self, pre: str, commit: str, iteration: int) -> None:
        diff = run_git(["diff", "--no-color", pre, commit], cwd=self.worktree.path)
        self.folder.write_text(self.folder.patch_path(iteration).name, diff + "\n")

    def _restore_tree(self, sha: str) -> None:
        restore_tree(self.worktree.path, self.cp.branch, sha)

    def _push(self) -> None:
        cp = self.cp
        cp.pushed_sha = self.cache.push(self.worktree, credentials=self._credentials())
        self._save()
        self.reporter.branch_pushed(cp.branch, cp.pushed_sha)

    def _write_prd(self) -> None:
        """The run folder's prd.json: the plan with the worker's `passes` and `attempts`."""
        plan = self._prd().to_json()
        plan["userStories"] = [
            {
                **s.model_dump(by_alias=True, mode="json", include=set(Story.model_fields)),
                "passes": s.state is StoryState.PASSED,
                "attempts": len(s.attempts),
            }
            for s in self.cp.stories
        ]
        self.folder.write_json(PRD_JSON, plan)

    # verify and deliver -------------------------------------------------------------------

    def _verify(self) -> list[GateResult]:
        cp = self.cp
        self._restore_tree(cp.head_sha)
        return self._run_gates("verification", fail_fast=False)

    def _deliver(self, final: list[GateResult], stop: StopReason) -> RunResult:
        cp = self.cp
        result = run_result(
            cp,
            final,
            project=self._prd().project,
            expected_gates=[g.name for g in self.gates],
            stop=stop,
            duration_s=time.monotonic() - self.started,
            run_dir=str(self.folder.path),
        )
        diff = run_git(["diff", "--no-color", cp.base_sha, cp.head_sha], cwd=self.worktree.path)
        write_delivery(self.folder, result, iterations=cp.iteration, diff=diff)
        cp.status, cp.step = RunStatus.FINISHED, RunStep.DONE
        self.step = RunStep.DONE
        self._save()
        self._write_run_json()
        return result


_OUTCOMES = {
    Verdict.PASSED: AttemptOutcome.PASSED,
    Verdict.UNVERIFIED: AttemptOutcome.UNVERIFIED,
    Verdict.FAILED: AttemptOutcome.GATES_FAILED,
}


def _story_subject(record: StoryRecord) -> str:
    title = " ".join(record.title.split())  # one line: agent-written titles may hold newlines
    # Merged, a subject saying "Closes #2" would close issue 2: the agent's words stay inert.
    return f"feat: [{record.id}] - {neutralize(title)}"


def _progress_line(record: StoryRecord, attempt: AttemptRecord) -> str:
    commit = f" commit {attempt.commit[:12]}" if attempt.commit else ""
    forbidden = (
        f"; reverted forbidden writes: {', '.join(attempt.forbidden_writes)}"
        if attempt.forbidden_writes
        else ""
    )
    why = f" ({attempt.reason})" if attempt.reason else ""
    return (
        f"iteration {attempt.iteration}: {record.id} attempt {attempt.attempt}: "
        f"{attempt.outcome}{why}{commit}{forbidden}"
    )
