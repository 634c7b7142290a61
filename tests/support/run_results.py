"""Run results built from a few words, for the tests of what reports them (PR body, console)."""

from __future__ import annotations

from worker.model.gates import GateResult, TestStatus
from worker.model.state import (
    AttemptOutcome,
    AttemptRecord,
    RunResult,
    StopReason,
    StoryRecord,
    StoryState,
)


def gate(name: str, passed: bool, failed: list[str] | None = None) -> GateResult:
    return GateResult(
        name=name,
        command=f"run {name}",
        passed=passed,
        exit_code=0 if passed else 1,
        timed_out=False,
        duration_s=1.0,
        tests=None if failed is None else dict.fromkeys(failed, TestStatus.FAILED),
    )


def story(story_id: str, state: StoryState, attempts: int = 1, **extra: object) -> StoryRecord:
    outcome = AttemptOutcome.PASSED if state is StoryState.PASSED else AttemptOutcome.GATES_FAILED
    reason = "" if state is StoryState.PASSED else "gate tests failed"
    return StoryRecord(
        id=story_id,
        title=f"Title of {story_id}",
        priority=1,
        acceptance_criteria=[f"{story_id} criterion"],
        state=state,
        attempts=[
            AttemptRecord(iteration=i + 1, attempt=i + 1, outcome=outcome, reason=reason)
            for i in range(attempts)
        ],
        commit="a" * 40 if state is StoryState.PASSED else None,
        **extra,
    )


def result(**overrides: object) -> RunResult:
    values: dict[str, object] = {
        "run_id": "req-001",
        "requirement_source": "docs/requirements/REQ-001-export.md",
        "project": "Export",
        "branch": "reqdrive/req-001-export",
        "base_ref": "main",
        "base_sha": "b" * 40,
        "head_sha": "c" * 40,
        "stories": [story("US-001", StoryState.PASSED), story("US-002", StoryState.PASSED)],
        "final_gates": [gate("tests", True)],
        "baseline_gates": [gate("tests", True)],
        "ready": True,
        "stop_reason": StopReason.ALL_STORIES_PASSED,
        "cost_usd": 1.234,
        "duration_s": 125.0,
    }
    values.update(overrides)
    return RunResult.model_validate(values)
