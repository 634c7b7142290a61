"""The run's record as it goes: its checkpoint, the step it is on, run.json and prd.json."""

from __future__ import annotations

import os

from worker.model.prd import Prd, Story
from worker.model.state import Checkpoint, CheckpointStore, RunStatus, RunStep, StoryState
from worker.report.protocol import Reporter
from worker.report.run_folder import PRD_JSON, RUN_JSON, RunFolder
from worker.run.spec import RunSpec


class RunJournal:
    """The one part of a run that changes as it goes: its checkpoint and the step it is on,
    saved where a resumed run (the checkpoint store) and a person (the run folder) find them."""

    def __init__(
        self, spec: RunSpec, store: CheckpointStore, folder: RunFolder, reporter: Reporter
    ) -> None:
        self.spec = spec
        self.store = store
        self.folder = folder
        self.reporter = reporter
        self.checkpoint: Checkpoint | None = None  # none until loaded, or the workspace is ready
        self.step = RunStep.PREFLIGHT
        # The reporter heard the run fail (exactly once, whatever failed after).
        self.failure_reported = False

    @property
    def cp(self) -> Checkpoint:
        if self.checkpoint is None:
            raise RuntimeError("the run has no checkpoint before its workspace is ready")
        return self.checkpoint

    @property
    def prd(self) -> Prd:
        if self.cp.prd is None:
            raise RuntimeError("the run has no plan yet")
        return self.cp.prd

    def save(self, *, step: RunStep | None = None) -> None:
        cp = self.cp
        if step is not None:
            cp.step = step
        self.store.save(cp)

    def enter(self, step: RunStep) -> None:
        """Record the step, so a failure (or a resumed run) can say where the run was."""
        self.step = step
        self.save(step=step)
        self.write_run_json()
        self.reporter.step_started(step)

    def pushed(self, sha: str) -> None:
        """The branch's head is on the remote now."""
        cp = self.cp
        cp.pushed_sha = sha
        self.save()
        self.reporter.branch_pushed(cp.branch, sha)

    def record_failure(self, message: str) -> None:
        """The run failed at its current step: said in the checkpoint and run.json."""
        if self.checkpoint is not None:
            self.checkpoint.status = RunStatus.FAILED
            self.checkpoint.error = message
            self.checkpoint.step = self.step
            self.store.save(self.checkpoint)
        self.write_run_json(error=message)

    def write_run_json(self, *, error: str | None = None) -> None:
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
                # Not measured by this run: an earlier run's results for the same tree and gates.
                "baseline_from_cache": cp.baseline_cached,
                # Each story's frozen tests (tests: first): the commit its code was judged on.
                "frozen_tests": {s.id: s.frozen.commit for s in cp.stories if s.frozen is not None},
            }
        if error:
            data["error"] = error
        self.folder.write_json(RUN_JSON, data)

    def write_prd(self) -> None:
        """The run folder's prd.json: the plan with the worker's `passes` and `attempts`."""
        plan = self.prd.to_json()
        plan["userStories"] = [
            {
                **s.model_dump(by_alias=True, mode="json", include=set(Story.model_fields)),
                "passes": s.state is StoryState.PASSED,
                "attempts": len(s.attempts),
            }
            for s in self.cp.stories
        ]
        self.folder.write_json(PRD_JSON, plan)
