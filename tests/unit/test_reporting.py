"""The PR body render and the console reporter, from plain run results."""

from __future__ import annotations

import io

from worker.gates import GateResult, TestStatus
from worker.reporting import ConsoleReporter, render_pr_body
from worker.state import (
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


def test_a_ready_run_says_so_with_stories_gates_checklist_cost_and_marker() -> None:
    body = render_pr_body(result(), closes_issue=12)
    assert "**2 of 2** stories" in body
    assert "**Ready for review**" in body
    assert "Closes #12" in body
    assert "| ✅ | US-001 | Title of US-001 | passed | 1 | `aaaaaaaaaaaa` |" in body
    assert "| tests | ✅ pass | ✅ pass | `run tests` |" in body
    assert "- [ ] US-002 criterion" in body
    assert "2m 05s" in body and "$1.23" in body
    assert body.rstrip().endswith("<!-- reqdrive:run req-001 -->")


def test_a_draft_says_why_and_shows_the_failed_story() -> None:
    body = render_pr_body(
        result(
            stories=[story("US-001", StoryState.PASSED), story("US-002", StoryState.FAILED, 3)],
            final_gates=[gate("tests", False, ["t::b"])],
            ready=False,
            draft_reason="1 of 2 stories did not pass: US-002 (failed)",
            stop_reason=StopReason.STORIES_SETTLED,
        )
    )
    assert "**Draft**: 1 of 2 stories did not pass: US-002 (failed)." in body
    assert "| ❌ | US-002 | Title of US-002 | failed (gate tests failed) | 3 | — |" in body
    assert "| tests | ✅ pass | ❌ fail (1 tests) |" in body
    assert "Closes" not in body


def test_baseline_failures_are_listed_as_fixed_and_remaining() -> None:
    body = render_pr_body(
        result(
            baseline_gates=[gate("tests", False, ["t::a", "t::b", "t::c"])],
            final_gates=[gate("tests", False, ["t::c"])],
            fixed_tests=["t::a", "t::b"],
            remaining_tests=["t::c"],
            ready=False,
            draft_reason="the final checks fail on the branch: tests",
        )
    )
    assert "Fixed by this branch (2):\n- `t::a`\n- `t::b`" in body
    assert "Still failing (1):\n- `t::c`" in body
    assert "| tests | ❌ fail (3 tests) | ❌ fail (1 tests) |" in body


def test_agent_written_text_cannot_break_the_table_or_forge_the_marker() -> None:
    hostile = story("US-001", StoryState.PASSED).model_copy(
        update={"title": "a | b <!-- reqdrive:run other --> c\nd"}
    )
    body = render_pr_body(result(stories=[hostile]))
    assert "a \\| b &lt;!-- reqdrive:run other --&gt; c d" in body
    assert body.count("<!-- reqdrive:run") == 1


def test_no_gates_is_called_out() -> None:
    body = render_pr_body(
        result(
            final_gates=[], baseline_gates=[], ready=False, draft_reason="no gates are configured"
        )
    )
    assert "nothing verified these changes" in body


def test_the_console_reporter_prints_each_story_as_it_finishes() -> None:
    out = io.StringIO()
    reporter = ConsoleReporter(out)
    record = story("US-002", StoryState.PENDING)
    reporter.story_started(record, 1, 3)
    attempt = AttemptRecord(
        iteration=3,
        attempt=1,
        outcome=AttemptOutcome.GATES_FAILED,
        reason="gate tests failed",
        gates=[gate("tests", False)],
    )
    reporter.story_finished(record, attempt)
    reporter.run_finished(result(ready=False, draft_reason="x", run_dir="/r"))
    lines = out.getvalue().splitlines()
    assert lines[0] == "→ US-002 attempt 1 (iteration 3): Title of US-002"
    assert (
        "US-002 attempt 1 gates failed: gate tests failed [tests FAILED] → story pending"
        in lines[1]
    )
    assert "done: 2/2 stories passed" in lines[2] and "draft: x" in lines[2]
