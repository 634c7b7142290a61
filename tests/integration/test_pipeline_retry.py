"""Re-running stories from a finished run: only they run again, on the same branch."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_pipeline import MakeProject, Project, implement, prd
from tests.integration.test_pipeline import make_project as make_project
from worker.exceptions import ResumeError
from worker.model.state import Checkpoint, StopReason, StoryState


def three_stories_us002_wrong(project: Project) -> None:
    project.scenario(
        {
            "plan": [{"prd": prd(3)}],
            "stories": {
                "US-001": [implement(1)],
                "US-002": [implement(2, correct=False)],
                "US-003": [implement(3)],
            },
        }
    )


def checkpoint(project: Project) -> Checkpoint:
    return Checkpoint.model_validate_json((project.run_dir() / "checkpoint.json").read_text())


def test_retrying_a_failed_story_runs_only_it_and_keeps_the_branch(
    make_project: MakeProject,
) -> None:
    project = make_project({"maxStoryRetries": 1})
    three_stories_us002_wrong(project)
    scenario = project.tmp / "scenario.json"
    first = project.run(scenario)
    assert [s.state for s in first.stories] == [
        StoryState.PASSED,
        StoryState.FAILED,
        StoryState.PASSED,
    ]
    before = {s.id: s for s in checkpoint(project).stories}
    calls_before = len(project.calls())

    data = json.loads(scenario.read_text())
    data["stories"]["US-002"] = [implement(2)]  # this time the agent gets it right
    scenario.write_text(json.dumps(data))
    again = project.run(scenario, retry=("US-002",))

    # Its frozen tests were frozen on the branch as it was then: they are written again.
    assert project.calls()[calls_before:] == ["US-002 1 tests", "US-002 1"]
    assert again.ready and again.stop_reason is StopReason.ALL_STORIES_PASSED
    after = {s.id: s for s in checkpoint(project).stories}
    assert after["US-001"] == before["US-001"] and after["US-003"] == before["US-003"]
    retried = after["US-002"]
    assert [a.attempt for a in retried.attempts] == [1] and retried.state is StoryState.PASSED
    assert retried.earlier_attempts == before["US-002"].attempts  # history kept, not counted
    assert project.branch_log() == [
        "test: [US-001] - Feature 1",
        "feat: [US-001] - Feature 1",
        "test: [US-003] - Feature 3",
        "feat: [US-003] - Feature 3",
        "test: [US-002] - Feature 2",
        "feat: [US-002] - Feature 2",
    ]
    assert "retry: US-002 pending again" in (project.run_dir() / "progress.txt").read_text()


def test_retry_of_every_failed_story_leaves_the_passed_ones(make_project: MakeProject) -> None:
    project = make_project({"maxStoryRetries": 1})
    three_stories_us002_wrong(project)
    scenario = project.tmp / "scenario.json"
    project.run(scenario)
    calls_before = len(project.calls())
    project.run(scenario, retry_failed=True)  # still wrong: one more attempt, failed again
    assert project.calls()[calls_before:] == ["US-002 1 tests", "US-002 1"]
    assert checkpoint(project).story("US-002").state is StoryState.FAILED


def test_an_unknown_story_id_is_refused_naming_the_plans_ids_and_changes_nothing(
    make_project: MakeProject,
) -> None:
    project = make_project({"maxStoryRetries": 1})
    three_stories_us002_wrong(project)
    scenario = project.tmp / "scenario.json"
    project.run(scenario)
    saved = (project.run_dir() / "checkpoint.json").read_text()
    with pytest.raises(
        ResumeError, match=r"cannot retry US-9: the plan has US-001, US-002, US-003"
    ):
        project.run(scenario, retry=("US-9",))
    assert (project.run_dir() / "checkpoint.json").read_text() == saved


def test_retry_without_an_earlier_run_is_refused(make_project: MakeProject) -> None:
    project = make_project()
    three_stories_us002_wrong(project)
    with pytest.raises(ResumeError, match="nothing to retry: run run-1 has no checkpoint"):
        project.run(project.tmp / "scenario.json", retry=("US-001",))
    assert project.calls() == []
