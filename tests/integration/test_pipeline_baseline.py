"""A requirement that arrives with its failing tests: stories are judged by what they add."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_pipeline import (
    MakeProject,
    Project,
    implement,
    prd,
    project_factory,
    story_commits,
)
from tests.support.pytest_command import QUIET_PLUGINS
from worker.model.gates import GateResult, TestStatus
from worker.model.state import AttemptOutcome, StopReason, StoryRecord, StoryState
from worker.verdict.judging import Verdict, judge
from worker.verdict.readiness import baseline_changes, readiness

JUNIT_TESTS = f"{sys.executable} -m pytest -q {QUIET_PLUGINS} --junitxml=$REQDRIVE_JUNIT_XML"
# The requirement's own tests, committed before any code: all three fail on the base commit.
REQ_TESTS = "".join(
    f"def test_{name}():\n    from req import {name}\n    assert {name}() == '{name}'\n\n\n"
    for name in ("a", "b", "c")
)


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def module(**returns: str) -> dict[str, Any]:
    body = "".join(f"def {name}():\n    return {value!r}\n\n\n" for name, value in returns.items())
    return {"write": {"req.py": body}}


def red_project(make_project: MakeProject, *, junit: bool) -> Project:
    command = JUNIT_TESTS if junit else JUNIT_TESTS.split(" --junitxml")[0]
    # Its plans give the stories none of the failing tests and the stories write none: one
    # call each (tests first would refuse a story that freezes no test).
    gate = {"name": "tests", "command": command, "junit": junit}
    return make_project(
        {"testCommand": None, "gates": [gate], "tests": "together"},
        files={"tests/test_req.py": REQ_TESTS},
    )


def test_a_story_that_breaks_a_test_an_earlier_story_fixed_fails(
    make_project: MakeProject,
) -> None:
    project = red_project(make_project, junit=True)
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(2)}],
            "stories": {
                "US-001": [module(a="a")],
                # Attempt 1 delivers b but breaks a, which US-001 had fixed: a new failure.
                "US-002": [module(a="broken", b="b"), module(a="a", b="b")],
            },
        }
    )
    result = project.run(scenario)

    first, second = result.stories
    assert first.state is StoryState.PASSED and first.attempts[0].reason == ""
    assert [a.outcome for a in second.attempts] == [
        AttemptOutcome.GATES_FAILED,
        AttemptOutcome.PASSED,
    ]
    assert second.attempts[0].reason == (
        # Run again alone, twice with the change and twice without: it broke for real.
        "tests.test_req::test_a fails now; it passed before the story "
        "(the same when run again alone)"
    )
    # test_c was failing before the run and still is: listed, and the PR stays a draft.
    assert [t.rsplit("test_", 1)[-1] for t in result.fixed_tests] == ["a", "b"]
    assert [t.rsplit("test_", 1)[-1] for t in result.remaining_tests] == ["c"]
    assert not result.ready
    assert result.draft_reason == (
        "the final checks fail on the branch: tests (fails on the base too)"
    )
    body = (project.run_dir() / "pr.md").read_text()
    assert "Fixed by this branch (2)" in body and "Still failing (1)" in body
    summary = json.loads((project.run_dir() / "verification-summary.json").read_text())
    assert len(summary["baseline_remaining_tests"]) == 1


def test_when_the_stories_fix_every_baseline_failure_the_pr_is_ready(
    make_project: MakeProject,
) -> None:
    project = red_project(make_project, junit=True)
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(2)}],
            "stories": {"US-001": [module(a="a", b="b")], "US-002": [module(a="a", b="b", c="c")]},
        }
    )
    result = project.run(scenario)
    assert [s.state for s in result.stories] == [StoryState.PASSED] * 2
    assert len(result.fixed_tests) == 3 and result.remaining_tests == []
    assert result.ready


def test_with_junit_off_pytest_still_gives_per_test_results(
    make_project: MakeProject,
) -> None:
    # The gate names no report: the worker asks pytest for one itself (PYTEST_ADDOPTS).
    project = red_project(make_project, junit=False)
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(2)}],
            "stories": {"US-001": [module(a="a")], "US-002": [module(a="a", b="b", c="c")]},
        }
    )
    result = project.run(scenario)
    assert [s.state for s in result.stories] == [StoryState.PASSED] * 2
    assert result.baseline_gates[0].failed_tests == [
        "tests.test_req::test_a",
        "tests.test_req::test_b",
        "tests.test_req::test_c",
    ]
    assert result.ready


# The judgement itself, on plain records -----------------------------------------------------


def record(name: str, passed: bool, failed: list[str] | None = None) -> GateResult:
    return GateResult(
        name=name,
        command=name,
        passed=passed,
        exit_code=0 if passed else 1,
        timed_out=False,
        duration_s=0.1,
        tests=None if failed is None else dict.fromkeys(failed, TestStatus.FAILED),
    )


@pytest.mark.parametrize(
    ("reference", "results", "verdict", "reason"),
    [
        ([record("tests", True)], [record("tests", True)], Verdict.PASSED, ""),
        (
            [record("tests", True)],
            [record("tests", False, [])],
            Verdict.FAILED,
            "gate tests failed",
        ),
        # A gate that fail-fast never reached is not a pass.
        (
            [record("tests", True), record("lint", True)],
            [record("tests", False)],
            Verdict.FAILED,
            "gate tests failed",
        ),
        (
            [record("tests", False, ["t::a", "t::b"])],
            [record("tests", False, ["t::b"])],
            Verdict.PASSED,
            "added no failing test",
        ),
        (
            [record("tests", False, ["t::a"])],
            [record("tests", False, ["t::a", "t::z"])],
            Verdict.FAILED,
            "gate tests: new failing tests: t::z",
        ),
        (
            [record("tests", False, None)],
            [record("tests", False, None)],
            Verdict.UNVERIFIED,
            "gate tests fails on the base too and reports neither per-test results nor "
            "findings (`path:line: message`), so what this story changed is unknown",
        ),
        # Green elsewhere stays required on a red baseline.
        (
            [record("tests", False, ["t::a"]), record("lint", True)],
            [record("tests", False, ["t::a"]), record("lint", False)],
            Verdict.FAILED,
            "gate lint failed",
        ),
    ],
)
def test_an_attempt_is_judged_against_the_state_it_started_from(
    reference: list[GateResult], results: list[GateResult], verdict: Verdict, reason: str
) -> None:
    expected = [g.name for g in reference]
    assert judge(reference, results, expected) == (verdict, reason)


def test_baseline_changes_split_fixed_from_remaining() -> None:
    baseline = [record("tests", False, ["a", "b", "c"]), record("e2e", False, ["x"])]
    assert baseline_changes(
        baseline, [record("tests", False, ["c", "new"]), record("e2e", True)]
    ) == (["a", "b", "x"], ["c"])
    # Without per-test results at the end nothing can be called fixed.
    assert baseline_changes(baseline[:1], [record("tests", False, None)]) == ([], ["a", "b", "c"])


def done(story_id: str, state: StoryState) -> StoryRecord:
    return StoryRecord(
        id=story_id, title=story_id, priority=1, acceptance_criteria=["x"], state=state
    )


@pytest.mark.parametrize(
    ("states", "final", "expected", "stop", "answer"),
    [
        (
            [StoryState.PASSED],
            [record("tests", True)],
            ["tests"],
            StopReason.ALL_STORIES_PASSED,
            (True, None),
        ),
        # An unverified story never makes the run ready, even with a green final check.
        (
            [StoryState.UNVERIFIED],
            [record("tests", True)],
            ["tests"],
            StopReason.STORIES_SETTLED,
            (False, "1 of 1 stories did not pass: US-1 (unverified)"),
        ),
        # Nor do final checks whose results the worker's collectors disagree on.
        (
            [StoryState.PASSED],
            [record("tests", True).model_copy(update={"disagreements": ["exit 0 with x failed"]})],
            ["tests"],
            StopReason.ALL_STORIES_PASSED,
            (
                False,
                "the final checks' results cannot be trusted: gate tests: exit 0 with x failed",
            ),
        ),
        (
            [StoryState.PASSED],
            [record("tests", True).model_copy(update={"no_results": "gate tests gives none"})],
            ["tests"],
            StopReason.ALL_STORIES_PASSED,
            (False, "the final checks' results cannot be trusted: gate tests gives none"),
        ),
        (
            [StoryState.PASSED, StoryState.PENDING],
            [record("tests", True)],
            ["tests"],
            StopReason.BUDGET_SPENT,
            (
                False,
                "budget reached (the run's budgetUsd); 1 of 2 stories did not pass: US-2 (pending)",
            ),
        ),
        (
            [StoryState.PASSED],
            [],
            ["tests"],
            StopReason.ALL_STORIES_PASSED,
            (False, "the final checks did not run: tests"),
        ),
        (
            [StoryState.PASSED],
            [],
            [],
            StopReason.ALL_STORIES_PASSED,
            (False, "no gates are configured, so nothing verified the stories"),
        ),
        (
            [StoryState.PASSED],
            [record("tests", True)],
            ["tests"],
            StopReason.CANCELLED,
            (False, "the run was cancelled"),
        ),
    ],
)
def test_ready_only_when_every_story_and_every_final_gate_passed(
    states: list[StoryState],
    final: list[GateResult],
    expected: list[str],
    stop: StopReason,
    answer: tuple[bool, str | None],
) -> None:
    stories = [done(f"US-{i + 1}", state) for i, state in enumerate(states)]
    assert readiness(stories, final, expected_gates=expected, stop=stop) == answer


def test_an_edited_requirements_run_on_the_earlier_runs_branch_judges_only_its_own_tests(
    make_project: MakeProject,
) -> None:
    # A new run (the requirement's text changed) starts on the branch the first run pushed:
    # the first run's tests pass there already and are none of the new stories' own tests.
    project = make_project()
    first = project.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    assert project.run(first).ready
    scaled = {  # feature one gains scaled(), with a test of its own
        "write": {
            "feature_1.py": "def value():\n    return 1\n\n\ndef scaled():\n    return 10\n",
            "tests/test_scaled.py": "import feature_1\n\n\ndef test_scaled():\n"
            "    assert feature_1.scaled() == 10\n",
        }
    }
    edited = replace(
        project.spec(first).requirement, text="# REQ-001\nFeature one also scales by ten.\n"
    )
    second = project.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [scaled]}})
    result = project.run(second, run_id="run-2", requirement=edited)

    [story] = result.stories
    assert story.state is StoryState.PASSED, story.attempts[-1].reason
    assert result.ready
    assert (
        "baseline on the branch head: tests passes"
        in (project.run_dir("run-2") / "progress.txt").read_text()
    )
    assert project.branch_log() == story_commits(1, 1)
