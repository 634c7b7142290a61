"""reqdrive as deployed: `/reqdrive retry US-002` from a writer re-runs only that story after a
run that left it failing, and the PR, the progress comment and the check run follow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_pipeline import git, implement
from tests.support.github_double import GitHubDouble
from tests.support.harness import Stack, sandbox_works, stack, wait_for
from tests.support.leaks import assert_no_secrets
from tests.support.scenes import Scene, all_calls, shop

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = "octo/shop"


def set_stories(scene: Scene, stories: dict[str, list[dict[str, Any]]]) -> None:
    """What the scripted agent does from its next call on (it reads its scenario every call)."""
    path = scene.agent_dir / "scenario.json"
    scenario = json.loads(path.read_text())
    scenario["stories"] = stories
    path.write_text(json.dumps(scenario))


def progress(double: GitHubDouble, issue: int) -> list[dict[str, Any]]:
    return [c for c in double.comments_on(REPO, issue) if "reqdrive:progress" in c["body"]]


def wait_for_progress(running: Stack, double: GitHubDouble, issue: int, text: str) -> None:
    try:
        wait_for(lambda: any(text in c["body"] for c in progress(double, issue)), 120, text)
    except AssertionError:
        raise AssertionError(running.logs()[-4000:]) from None


def test_retry_of_the_failed_story_reruns_only_it_and_marks_the_pr_ready(
    tmp_path: Path, double: GitHubDouble
) -> None:
    # US-002's code is wrong on every attempt of the first run, so the run ends as a draft.
    wrong = {"US-001": [implement(1)], "US-002": [implement(2, correct=False)]}
    scene = shop(tmp_path, double, REPO, stories=wrong)
    issue, root = scene.issue, tmp_path / "stack"
    root.mkdir()
    with stack(double, None, root, scene.env()) as running:
        payload = double.labeled_payload(REPO, issue, "reqdrive", "alice")
        assert double.deliver(running.webhook_url, "issues", payload).status_code == 202
        wait_for_progress(running, double, issue, "Finished as a draft")
        first_calls = all_calls(running)
        [pull] = double.pulls_of(REPO)
        draft_body, draft = pull["body"], pull["draft"]
        [first_comment] = progress(double, issue)
        draft_comment = first_comment["body"]

        # The retry's attempt writes the code that passes (a real change on the branch).
        set_stories(scene, {"US-001": [implement(1)], "US-002": [implement(2)]})
        command = double.comment_payload(REPO, issue, "/reqdrive retry US-002", "alice")
        assert double.deliver(running.webhook_url, "issue_comment", command).status_code == 202
        wait_for_progress(running, double, issue, "✅ Done")
        calls = all_calls(running)
        logs = running.logs()

    assert first_calls == ["plan 1", "US-001 1", "US-002 1", "US-002 2", "US-002 3"]
    assert calls == [*first_calls, "US-002 1"]  # US-001 was not run again
    assert draft is True
    assert "/reqdrive retry US-002" in draft_comment
    [pull] = double.pulls_of(REPO)
    assert pull["draft"] is False
    assert pull["body"] != draft_body and f"Closes #{issue}" in pull["body"]
    assert "in progress" not in pull["body"] and "draft" not in pull["body"].lower()
    [comment] = progress(double, issue)  # the same comment, edited in place
    assert comment["id"] == first_comment["id"]
    assert "✅ Done" in comment["body"] and "/reqdrive retry" not in comment["body"]
    bare, branch = double.bare(REPO), pull["head"]["ref"]
    assert git(bare, "log", "--format=%s", f"main..{branch}").splitlines() == [
        "feat: [US-002] - Feature 2",
        "feat: [US-001] - Feature 1",
    ]
    head = git(bare, "rev-parse", branch)
    checks = [r for r in double.check_runs_of(REPO) if r["head_sha"] == head]
    assert [(r["status"], r["conclusion"]) for r in checks] == [("completed", "success")]
    assert all(r["status"] == "completed" for r in double.check_runs_of(REPO))
    # The default sandbox confined every agent call and check (where bubblewrap works).
    assert ("UNCONFINED" in logs) is not sandbox_works()
    assert_no_secrets(double, root)
