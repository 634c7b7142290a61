"""The Reporter protocol a run's progress goes through, and the reporter that reports nowhere."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from worker.model.gates import GateResult, GateSpec
from worker.model.state import AttemptRecord, RunResult, RunStep, StoryRecord


class Reporter(Protocol):
    """Receives a run's progress; GitHub and the console are two implementations.

    Every run that starts ends with exactly one of `run_finished` (a result: ready, draft,
    cancelled, budget or iterations spent) or `run_failed` (the step it stopped at and a
    redacted message, with the exception's class name so a reporter can tell a configuration
    error from a fault). The engine delivers events in order from a thread of its own
    (worker.report.background), so an implementation may be slow or raise: it is retried.
    """

    def run_started(self, run_id: str, source: str, branch: str) -> None: ...

    def step_started(self, step: RunStep) -> None: ...

    def plan_ready(self, stories: Sequence[StoryRecord]) -> None: ...

    def story_started(self, story: StoryRecord, attempt: int, iteration: int) -> None: ...

    def story_finished(self, story: StoryRecord, attempt: AttemptRecord) -> None: ...

    def branch_pushed(self, branch: str, sha: str) -> None: ...

    # What runs now, for a person watching (the console); `label` names the call or gate run
    # as the run folder does: "plan-1" or the iteration for agent calls; "baseline",
    # "verification", "iteration-3" (and its ".parent", ".restored" runs) for gates.
    def agent_started(self, label: str) -> None: ...

    def agent_finished(self, label: str, seconds: float, ended: str) -> None: ...

    def gates_started(self, label: str, gates: Sequence[GateSpec]) -> None: ...

    def gates_finished(self, label: str, results: Sequence[GateResult], seconds: float) -> None: ...

    def run_finished(self, result: RunResult) -> None: ...

    def run_failed(self, step: RunStep, message: str, *, error_type: str = "") -> None: ...


class NullReporter:
    """Reports nowhere (jobs that only need the result, benchmarks); the base of a reporter
    that takes only some events (GitHub shows no agent call or gate run as it starts)."""

    def run_started(self, run_id: str, source: str, branch: str) -> None:
        pass

    def step_started(self, step: RunStep) -> None:
        pass

    def plan_ready(self, stories: Sequence[StoryRecord]) -> None:
        pass

    def story_started(self, story: StoryRecord, attempt: int, iteration: int) -> None:
        pass

    def story_finished(self, story: StoryRecord, attempt: AttemptRecord) -> None:
        pass

    def branch_pushed(self, branch: str, sha: str) -> None:
        pass

    def agent_started(self, label: str) -> None:
        pass

    def agent_finished(self, label: str, seconds: float, ended: str) -> None:
        pass

    def gates_started(self, label: str, gates: Sequence[GateSpec]) -> None:
        pass

    def gates_finished(self, label: str, results: Sequence[GateResult], seconds: float) -> None:
        pass

    def run_finished(self, result: RunResult) -> None:
        pass

    def run_failed(self, step: RunStep, message: str, *, error_type: str = "") -> None:
        pass
