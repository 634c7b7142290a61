"""The PR keeps what is true: a retry or an edit that finds nothing to change leaves it ready."""

from __future__ import annotations

import json

from bot.requests import JobKind
from tests.integration.test_jobs import REPO, Scene, progress_comments
from tests.integration.test_jobs import scene as scene
from tests.integration.test_pipeline import git, implement, prd

PATH = "docs/requirements/REQ-001-demo.md"


def three_stories() -> dict[str, object]:
    return {"plan": [{"prd": prd(3)}], "stories": {f"US-00{n}": [implement(n)] for n in (1, 2, 3)}}


def _ready_on_its_head(scene: Scene) -> dict[str, object]:
    [pull] = scene.gh.pulls_of(REPO)
    head = git(scene.remote, "rev-parse", pull["head"]["ref"])
    runs = [r for r in scene.gh.check_runs_of(REPO) if r["head_sha"] == head]
    assert [r["conclusion"] for r in runs] == ["success"]
    return pull


def test_retrying_a_passed_story_with_nothing_to_change_keeps_the_pr_ready(scene: Scene) -> None:
    gh = scene.gh
    issue = gh.add_issue(REPO, "Features", "Build features one to three.")
    scene.scenario(three_stories())
    scene.enqueue(JobKind.RUN, requirement=f"ISSUE-{issue}", issue_number=issue)
    scene.work()
    [pull] = gh.pulls_of(REPO)
    assert pull["draft"] is False
    calls_before = len(scene.project.calls())
    scene.scenario({"stories": {"US-002": [{}]}})  # the agent finds nothing to change

    scene.enqueue(JobKind.RETRY, issue_number=pull["number"], story_id="US-002", comment_id=77)
    scene.work()

    assert scene.project.calls()[calls_before:] == ["US-002 1 tests", "US-002 1"]
    pull = _ready_on_its_head(scene)
    assert pull["draft"] is False
    body = str(pull["body"])
    assert "passed (nothing to change)" in body and "3 passed" in body
    assert "did not pass" not in body and "not judged yet" not in body
    progress = progress_comments(gh, issue)[0]["body"]
    assert "✅ Done" in progress and "nothing to change" in progress


def test_an_edit_the_branch_already_satisfies_keeps_the_pr_ready(scene: Scene) -> None:
    gh = scene.gh
    head = git(scene.remote, "rev-parse", "main")
    gh.set_file(REPO, head, PATH, "# REQ-001\nBuild features one to three.\n")
    scene.scenario(three_stories())
    scene.enqueue(JobKind.RUN, requirement=PATH, head_sha=head)
    scene.work()
    [pull] = gh.pulls_of(REPO)
    assert pull["draft"] is False
    calls_before = len(scene.project.calls())

    # A sentence the code already satisfies: the plan keeps the three stories and adds one.
    plan = prd(3)
    plan["userStories"].append(
        {
            "id": "US-004",
            "title": "Feature 2 gives an integer",
            "description": "As a user I want feature 2 to give an integer",
            "acceptanceCriteria": ["feature_2.value() is an int"],
            "priority": 4,
        }
    )
    int_test = "import feature_2\n\n\ndef test_int():\n    assert feature_2.value() == 2\n"
    scenario = json.loads((scene.tmp / "scenario.json").read_text())
    scenario["plan"] = [{"prd": plan}]
    scenario["stories"]["US-004"] = [
        {"tests": {"write": {"tests/test_feature_4.py": int_test}}, "implement": {}}
    ]
    scene.scenario(scenario)
    gh.set_file(REPO, "edited", PATH, "# REQ-001\nBuild features one to three.\nTwo is an int.\n")
    scene.enqueue(JobKind.RUN, requirement=PATH, head_sha="edited")
    scene.work()

    assert scene.project.calls()[calls_before:] == ["plan 1", "US-004 1 tests"]
    pull = _ready_on_its_head(scene)
    assert pull["draft"] is False
    body = str(pull["body"])
    assert "4 passed" in body and "did not pass" not in body
    assert "| US-004 | Feature 2 gives an integer | passed (nothing to change) |" in body
