"""A story is judged on its tests at the branch's head, not on whether the agent typed something."""

from __future__ import annotations

import json

from tests.integration.test_pipeline import MakeProject, implement, prd
from tests.integration.test_pipeline import make_project as make_project
from tests.integration.test_pipeline_judging import (
    GATE_PATH,
    TEST_IDS,
    calc_prd,
    calc_project,
    op,
    pr_body,
    run,
)
from worker.model.state import AttemptOutcome, StopReason, StoryState


def test_a_retried_passed_story_with_nothing_to_change_stays_passed_and_the_pr_ready(
    make_project: MakeProject,
) -> None:
    project = make_project()
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(3)}],
            "stories": {f"US-00{n}": [implement(n)] for n in (1, 2, 3)},
        }
    )
    first = project.run(scenario)
    assert first.ready
    calls_before = len(project.calls())

    data = json.loads(scenario.read_text())
    data["stories"]["US-002"] = [{}, {}, {}]  # the agent finds nothing to change
    scenario.write_text(json.dumps(data))
    again = project.run(scenario, retry=("US-002",))

    # Its tests call and its implement call, both changing nothing; no retries spent.
    assert project.calls()[calls_before:] == ["US-002 1 tests", "US-002 1"]
    retried = again.stories[1]
    assert retried.state is StoryState.PASSED
    [attempt] = retried.attempts
    assert attempt.outcome is AttemptOutcome.NOTHING_TO_CHANGE
    [own] = [c for c in attempt.tests if c.owned]
    assert (own.id, own.after) == ("tests.test_feature_2::test_feature_2", "passed")
    assert again.ready and again.draft_reason is None
    assert again.stop_reason is StopReason.ALL_STORIES_PASSED
    body = (project.run_dir() / "pr.md").read_text()
    assert "| US-002 | Feature 2 | passed (nothing to change) |" in body
    assert "did not pass" not in body and "not judged yet" not in body
    assert "US-002 attempt 1 passed (nothing to change)" in project.console.getvalue()
    assert project.branch_log() == [
        f"{kind}: [US-00{n}] - Feature {n}" for n in (1, 2, 3) for kind in ("test", "feat")
    ]


def test_a_story_claiming_only_tests_that_pass_at_the_base_is_not_passed_for_changing_nothing(
    make_project: MakeProject,
) -> None:
    # A planner that gives a story tests already passing, then an implementer that does
    # nothing, must not make a ready PR: those tests show nothing of the story's work.
    project = calc_project(make_project, files={"add.py": "def add(a, b):\n    return a + b\n"})
    result = run(
        project,
        {
            "plan": [{"prd": calc_prd()}],
            "stories": {"US-001": [{}, {}, {}], "US-002": [op("sub")], "US-003": [op("mul")]},
        },
    )

    add, sub, mul = result.stories
    assert (sub.state, mul.state) == (StoryState.PASSED, StoryState.PASSED)
    assert add.state is StoryState.FAILED
    # Tests first: refused at its tests call, which wrote no test (no code call is made).
    assert {a.outcome for a in add.attempts} == {AttemptOutcome.TESTS_REFUSED}
    assert "its tests passed before the story: nothing shows it done" in add.attempts[0].reason
    assert not result.ready
    assert "passed (nothing to change)" not in pr_body(project)


def test_a_story_whose_tests_fail_and_that_changes_nothing_still_fails_with_no_changes(
    make_project: MakeProject,
) -> None:
    project = calc_project(make_project, config={"maxStoryRetries": 2})
    result = project.run(
        project.scenario(
            {
                "plan": [{"prd": calc_prd()}],
                "stories": {"US-001": [{}, {}], "US-002": [op("sub")], "US-003": [op("mul")]},
            }
        ),
        gate_path=GATE_PATH,
    )

    add = result.stories[0]
    assert add.state is StoryState.FAILED and not result.ready
    assert [(a.outcome, a.reason) for a in add.attempts] == [
        (AttemptOutcome.NO_CHANGES, "no changes")
    ] * 2
    [own] = [c for c in add.attempts[-1].tests if c.owned]
    assert (own.id, own.after, own.problem) == (TEST_IDS["add"], "failed", "still fails")
    assert "1 of 3 stories did not pass: US-001 (failed)" in pr_body(project)


# A second test of feature 2, which the tests call writes on a retry: it passes on the branch
# (US-002's code is there) and fails on the base commit (feature_2 does not exist there).
MORE_FEATURE_2 = (
    "import feature_2\n\n\ndef test_feature_2_is_an_int():\n"
    "    assert isinstance(feature_2.value(), int)\n"
)


def test_a_retried_passed_story_whose_tests_call_writes_a_passing_test_is_nothing_to_change(
    make_project: MakeProject,
) -> None:
    # A real agent asked for a passed story's tests again writes one more that already passes:
    # it proves nothing fail→pass on the head, but the branch's own work shows on the base
    # commit. The story is decided there: no implement call, no retries spent.
    project = make_project()
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(3)}],
            "stories": {f"US-00{n}": [implement(n)] for n in (1, 2, 3)},
        }
    )
    assert project.run(scenario).ready
    calls_before = len(project.calls())

    data = json.loads(scenario.read_text())
    data["stories"]["US-002"] = [
        {"tests": {"write": {"tests/test_feature_2_more.py": MORE_FEATURE_2}}, "implement": {}}
    ]
    scenario.write_text(json.dumps(data))
    again = project.run(scenario, retry=("US-002",))

    assert project.calls()[calls_before:] == ["US-002 1 tests"]
    retried = again.stories[1]
    assert retried.state is StoryState.PASSED
    [attempt] = retried.attempts
    assert attempt.outcome is AttemptOutcome.NOTHING_TO_CHANGE, attempt.reason
    owned = {c.id: (c.before, c.after) for c in attempt.tests if c.owned}
    assert owned["tests.test_feature_2::test_feature_2"][1] == "passed"
    assert owned["tests.test_feature_2_more::test_feature_2_is_an_int"] == ("failed", "passed")
    assert "fail on the base commit" in attempt.reason
    assert again.ready and again.draft_reason is None
    body = (project.run_dir() / "pr.md").read_text()
    assert "| US-002 | Feature 2 | passed (nothing to change) |" in body
    assert "did not pass" not in body and "not judged yet" not in body
    # Its new test, shown failing without the branch's work, is kept on the branch.
    assert project.branch_log()[-1] == "test: [US-002] - Feature 2"
    assert "tests/test_feature_2_more.py" in project.branch_files()
    assert retried.commit is not None
