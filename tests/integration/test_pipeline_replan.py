"""An edited requirement re-plans against the branch as it is; only what the edit changed runs."""

from __future__ import annotations

import json
from typing import Any

from tests.integration.test_pipeline import MakeProject, git, implement, prd, story_commits
from tests.integration.test_pipeline import make_project as make_project
from worker.model.state import AttemptOutcome, StopReason, StoryState
from worker.run.spec import Requirement

EDITED = Requirement(
    text="# REQ-001\nBuild features one to four.\nFeature 2 gives an integer.\n",
    source="docs/requirements/REQ-001-demo.md",
    slug="req-001-demo",
    repo_path="docs/requirements/REQ-001-demo.md",
)
# The sentence the edit adds, which US-002's code already satisfies: a story of its own.
US_004: dict[str, Any] = {
    "id": "US-004",
    "title": "Feature 2 gives an integer",
    "description": "As a user I want feature 2 to give an integer",
    "acceptanceCriteria": ["feature_2.value() is an int"],
    "priority": 4,
    "notes": "",
}
INT_TEST = (
    "import feature_2\n\n\ndef test_feature_2_is_an_int():\n"
    "    assert isinstance(feature_2.value(), int)\n"
)


def test_an_edit_the_branch_already_satisfies_keeps_every_result_and_the_pr_ready(
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
    head = git(project.remote, "rev-parse", "reqdrive/req-001-demo")
    calls_before = len(project.calls())

    # The edited text's plan: the three stories as they were, and one for the new sentence.
    plan = prd(3)
    plan["userStories"].append(US_004)
    data = json.loads(scenario.read_text())
    data["plan"] = [{"prd": plan}]
    data["stories"]["US-004"] = [
        {"tests": {"write": {"tests/test_feature_4.py": INT_TEST}}, "implement": {}}
    ]
    scenario.write_text(json.dumps(data))
    again = project.run(scenario, run_id="run-2", requirement=EDITED, previous_run="run-1")

    # One planning call, which saw the earlier plan, and US-004's tests call: nothing else.
    assert project.calls()[calls_before:] == ["plan 1", "US-004 1 tests"]
    prompt = (project.run_dir("run-2") / "iteration-plan-1.prompt.md").read_text()
    assert "This requirement was edited: its earlier plan" in prompt
    assert '"title": "Feature 3"' in prompt and '"state": "passed"' in prompt
    assert [s.state for s in again.stories] == [StoryState.PASSED] * 4
    for n, kept in zip((1, 2, 3), again.stories, strict=False):
        assert kept.commit == first.stories[n - 1].commit
        assert [a.iteration for a in kept.attempts] == [n]
    added = again.stories[3].attempts[-1]
    assert added.outcome is AttemptOutcome.NOTHING_TO_CHANGE, added.reason
    assert added.iteration == 4
    assert again.ready and again.draft_reason is None
    assert again.stop_reason is StopReason.ALL_STORIES_PASSED
    body = (project.run_dir("run-2") / "pr.md").read_text()
    assert "| US-004 | Feature 2 gives an integer | passed (nothing to change) |" in body
    assert "| US-002 | Feature 2 | passed |" in body
    assert "did not pass" not in body
    # Its test, failing on the base commit, is the only new commit on the branch.
    assert git(project.remote, "log", "--format=%s", f"{head}..reqdrive/req-001-demo") == (
        "test: [US-004] - Feature 2 gives an integer"
    )
    assert project.branch_log()[:6] == story_commits(1, 2, 3)


def test_a_story_the_edit_changed_runs_again_and_the_others_keep_their_result(
    make_project: MakeProject,
) -> None:
    project = make_project()
    scenario = project.scenario(
        {"plan": [{"prd": prd(3)}], "stories": {f"US-00{n}": [implement(n)] for n in (1, 2, 3)}}
    )
    assert project.run(scenario).ready
    calls_before = len(project.calls())

    plan = prd(3)
    plan["userStories"][2]["acceptanceCriteria"] = ["feature_3.value() returns 3", "and is odd"]
    data = json.loads(scenario.read_text())
    data["plan"] = [{"prd": plan}]
    odd = "import feature_3\n\n\ndef test_odd():\n    assert feature_3.value() % 2 == 1\n"
    data["stories"]["US-003"] = [
        {"tests": {"write": {"tests/test_feature_3_odd.py": odd}}, "implement": {}}
    ]
    scenario.write_text(json.dumps(data))
    again = project.run(scenario, run_id="run-2", requirement=EDITED, previous_run="run-1")

    assert project.calls()[calls_before:] == ["plan 1", "US-003 1 tests"]
    one, two, three = again.stories
    assert (one.state, two.state, three.state) == (StoryState.PASSED,) * 3
    assert three.attempts[-1].outcome is AttemptOutcome.NOTHING_TO_CHANGE
    assert again.ready
