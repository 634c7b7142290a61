"""A run's failing tests reach the check run as annotations on their lines, from real pytest."""

from __future__ import annotations

from bot.requests import JobKind
from tests.integration.test_jobs import REPO, Scene, progress_comments, scene  # noqa: F401
from tests.integration.test_pipeline import git, implement, prd
from worker.report.inert_text import ZWJ

# Where implement(2, correct=False)'s test fails: `assert feature_2.value() == 2`.
FAILING = {
    "path": "tests/test_feature_2.py",
    "start_line": 5,
    "end_line": 5,
    "annotation_level": "failure",
    "title": "tests.test_feature_2::test_feature_2",
}


def test_a_story_failing_its_tests_annotates_the_check_run_on_the_failing_line(
    scene: Scene,  # noqa: F811
) -> None:
    gh = scene.gh
    issue = gh.add_issue(REPO, "Features", "Build features one and two.")
    plan = prd(2)
    plan["userStories"][1]["title"] = "Feature 2 for @octocat, Closes #99"
    scene.scenario(
        {
            "plan": [{"prd": plan}],
            # US-002 fails every attempt (three by default): the same failure, one annotation.
            "stories": {"US-001": [implement(1)], "US-002": [implement(2, correct=False)]},
        }
    )

    scene.enqueue(JobKind.RUN, requirement=f"ISSUE-{issue}", issue_number=issue)
    scene.work()

    [pull] = gh.pulls_of(REPO)
    head = git(scene.remote, "rev-parse", pull["head"]["ref"])
    [check] = [r for r in gh.check_runs_of(REPO) if r["head_sha"] == head]
    assert (check["status"], check["conclusion"]) == ("completed", "failure")
    [annotation] = check["_annotations"]
    assert {k: annotation[k] for k in FAILING} == FAILING
    assert annotation["message"].startswith("assert -1 == 2")
    # Sent while the run went on (after the first failing attempt), not at its end only.
    annotated = [c for c in gh.calls if c.method == "PATCH" and "annotations" in str(c.body)]
    assert [c.body["status"] for c in annotated] == ["in_progress"]
    # The story's title is the agent's: shown, but it mentions no one and closes nothing.
    [comment] = progress_comments(gh, issue)
    for text in (comment["body"], check["output"]["summary"]):
        assert f"Feature 2 for @{ZWJ}octocat, C{ZWJ}loses #99" in text
        assert "@octocat" not in text and "Closes #99" not in text
