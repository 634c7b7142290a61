"""reqdrive as deployed, driven by pushes: a REQ file pushed to the default branch becomes a pull
request, an edit of it updates the same one, and the App's own pushes trigger nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_pipeline import git, implement, prd
from tests.support.github_double import GitHubDouble
from tests.support.github_http import APP_LOGIN
from tests.support.harness import Stack, sandbox_works, stack, wait_for
from tests.support.leaks import assert_no_secrets
from tests.support.scenes import Scene, agent_calls, shop

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = "octo/shop"
REQ = "docs/requirements/REQ-001-checkout.md"
FIRST_TEXT = "# REQ-001 Checkout\n\nFeatures one and two return 1 and 2 (amber).\n"
EDITED_TEXT = "# REQ-001 Checkout\n\nFeatures one and two also scale by ten (violet).\n"


def revision(n: int, mark: str) -> dict[str, Any]:
    """A story attempt that builds what the edited text adds: feature n also scales by 10,
    with a new test (one that fails on the branch as the first text left it)."""
    return {
        "write": {
            f"feature_{n}.py": (
                f'"""Feature {n}, {mark}."""\n\n\ndef value():\n    return {n}\n\n\n'
                f"def scaled():\n    return {10 * n}\n"
            ),
            f"tests/test_feature_{n}_scaled.py": (
                f"import feature_{n}\n\n\ndef test_feature_{n}_scaled():\n"
                f"    assert feature_{n}.scaled() == {10 * n}\n"
            ),
        }
    }


def edited_plan() -> dict[str, Any]:
    """The plan of the edited text: both stories now also scale by ten. (Stories the edit left
    word for word keep their earlier verdict and are not built again: replan.py.)"""
    plan = prd(2)
    for story in plan["userStories"]:
        n = story["id"][-1]
        story["description"] += " scaled by ten"
        story["acceptanceCriteria"].append(f"feature_{n}.scaled() returns {n}0")
    return plan


def set_stories(scene: Scene, stories: dict[str, list[dict[str, Any]]]) -> None:
    """What the scripted agent plans and does from its next call on (it reads its scenario
    every call): the edited text's plan, and these stories' attempts."""
    path = scene.agent_dir / "scenario.json"
    scenario = json.loads(path.read_text())
    scenario["plan"] = [{"prd": edited_plan()}]
    scenario["stories"] = stories
    path.write_text(json.dumps(scenario))


def progress_comments(double: GitHubDouble) -> list[dict[str, Any]]:
    return [c for c in double.comments.values() if "reqdrive:progress" in (c["body"] or "")]


def pushed_by_person(double: GitHubDouble, running: Stack, text: str) -> None:
    push = double.push_files(REPO, {REQ: text}, "Requirement REQ-001")
    payload = double.push_payload(push, "alice")
    answer = double.deliver(running.webhook_url, "push", payload)
    assert answer.status_code == 202, answer.text


def prompts_of(running: Stack, run_id: str) -> str:
    folder = running.work_dir / "runs" / run_id
    return "".join(p.read_text() for p in sorted(folder.glob("*.prompt.md")))


def finished_run(running: Stack, double: GitHubDouble, earlier: list[str]) -> str | None:
    """The run beside `earlier` ones that made its three calls and whose progress comment
    says it is done, if there is one."""
    for run_id, calls in agent_calls(running).items():
        marker = f"reqdrive:progress {run_id} "
        done = any(
            "✅ Done" in c["body"] and marker in c["body"] for c in progress_comments(double)
        )
        if run_id not in earlier and len(calls) == 3 and done:
            return run_id
    return None


def wait_for_run(running: Stack, double: GitHubDouble, earlier: list[str]) -> str:
    try:
        wait_for(lambda: finished_run(running, double, earlier) is not None, 120, "a run ended")
    except AssertionError:
        raise AssertionError(running.logs()[-4000:]) from None
    return finished_run(running, double, earlier) or ""


def test_a_pushed_req_file_opens_a_pr_and_an_edit_updates_the_same_pr(
    tmp_path: Path, double: GitHubDouble
) -> None:
    scene = shop(tmp_path, double, REPO)
    root = tmp_path / "stack"
    root.mkdir()
    with stack(double, None, root, scene.env()) as running:
        pushed_by_person(double, running, FIRST_TEXT)
        first_run = wait_for_run(running, double, [])
        [pull] = double.pulls_of(REPO)
        branch = pull["head"]["ref"]
        first_commits = git(double.bare(REPO), "log", "--format=%s", f"main..{branch}")
        first_pull = dict(pull)

        set_stories(scene, {"US-001": [revision(1, "violet")], "US-002": [revision(2, "violet")]})
        pushed_by_person(double, running, EDITED_TEXT)
        second_run = wait_for_run(running, double, [first_run])
        runs, logs = agent_calls(running), running.logs()

    assert first_commits.splitlines() == [
        "feat: [US-002] - Feature 2",
        "feat: [US-001] - Feature 1",
    ]
    assert first_pull["draft"] is False
    assert f"`{REQ}`" in first_pull["body"]
    assert list(runs) == sorted([first_run, second_run])
    # The default sandbox confined every agent call and check (where bubblewrap works).
    assert ("UNCONFINED" in logs) is not sandbox_works()
    assert runs[first_run] == runs[second_run] == ["plan 1", "US-001 1", "US-002 1"]
    # Each run built the text of its own push: the agent was prompted with it.
    assert "amber" in prompts_of(running, first_run)
    assert "violet" in prompts_of(running, second_run)
    assert "amber" not in prompts_of(running, second_run)

    [same_pull] = double.pulls_of(REPO)  # the edit updated the PR it opened, none beside it
    assert same_pull["number"] == first_pull["number"] and same_pull["draft"] is False
    assert second_run in same_pull["body"] and first_run not in same_pull["body"]
    bare = double.bare(REPO)
    assert git(bare, "log", "--format=%s", f"main..{branch}").splitlines() == [
        "feat: [US-002] - Feature 2",
        "feat: [US-001] - Feature 1",
        "feat: [US-002] - Feature 2",
        "feat: [US-001] - Feature 1",
    ]
    assert "violet" in git(bare, "show", f"{branch}:feature_1.py")
    # One progress comment, on the PR, edited to the second run's end.
    [progress] = progress_comments(double)
    assert progress in double.comments_on(REPO, same_pull["number"])
    assert "✅ Done" in progress["body"] and second_run in progress["body"]
    head = git(bare, "rev-parse", branch)
    checks = [r for r in double.check_runs_of(REPO) if r["head_sha"] == head]
    assert [(r["status"], r["conclusion"]) for r in checks] == [("completed", "success")]
    assert all(r["status"] == "completed" for r in double.check_runs_of(REPO))
    assert_no_secrets(double, root)


def test_the_apps_own_push_replayed_as_a_delivery_triggers_nothing(
    tmp_path: Path, double: GitHubDouble
) -> None:
    scene = shop(tmp_path, double, REPO, plan=prd(1), stories={"US-001": [implement(1)]})
    root = tmp_path / "stack"
    root.mkdir()
    env = {**scene.env(), "REQDRIVE_APP_SLUG": APP_LOGIN.removesuffix("[bot]")}
    with stack(double, None, root, env) as running:
        payload = double.labeled_payload(REPO, scene.issue, "reqdrive", "alice")
        assert double.deliver(running.webhook_url, "issues", payload).status_code == 202

        def done() -> bool:
            return any("✅ Done" in c["body"] for c in progress_comments(double))

        try:
            wait_for(done, 120, "the run finished")
        except AssertionError:
            raise AssertionError(running.logs()[-4000:]) from None
        time.sleep(1)  # the run's last writes after the comment
        calls, writes = agent_calls(running), len(double.writes())
        own = [push for push in double.pushes if push["ref"].startswith("refs/heads/reqdrive/")]
        assert own, "the App pushed its branch"
        for push in own:
            answer = double.deliver(
                running.webhook_url, "push", double.push_payload(push, APP_LOGIN)
            )
            assert answer.status_code == 204, answer.text  # verified, and nothing to do
        time.sleep(5)  # a job, had one been queued, would have reached GitHub by now
        after_calls = agent_calls(running)

    assert after_calls == calls
    assert len(double.writes()) == writes
    assert_no_secrets(double, root)


def test_an_edit_pushed_while_its_run_runs_is_run_again_once_the_current_story_ends(
    tmp_path: Path, double: GitHubDouble
) -> None:
    slow = {"US-001": [{"sleep": 6, **implement(1)}], "US-002": [implement(2)]}
    scene = shop(tmp_path, double, REPO, stories=slow)
    root = tmp_path / "stack"
    root.mkdir()
    with stack(double, None, root, scene.env()) as running:
        pushed_by_person(double, running, FIRST_TEXT)

        def story_running() -> bool:
            return any("US-001 1" in calls for calls in agent_calls(running).values())

        wait_for(story_running, 60, "the first run's US-001 started")
        [first_run] = agent_calls(running)
        later = {"US-001": [revision(1, "violet")], "US-002": [implement(2)]}
        set_stories(scene, later)  # read by the agent's next call, not the one running
        push = double.push_files(REPO, {REQ: EDITED_TEXT}, "Requirement REQ-001, edited")
        answer = double.deliver(running.webhook_url, "push", double.push_payload(push, "alice"))
        assert answer.status_code == 202, answer.text
        [job] = answer.json()["jobs"]
        assert job["rerun"] == "after the running job ends"
        second_run = wait_for_run(running, double, [first_run])
        runs = agent_calls(running)

    # The old text's run finished US-001 and started nothing more; the new text ran whole.
    assert runs[first_run] == ["plan 1", "US-001 1"]
    assert runs[second_run] == ["plan 1", "US-001 1", "US-002 1"]
    assert "violet" in prompts_of(running, second_run)
    [pull] = double.pulls_of(REPO)
    assert pull["draft"] is False and second_run in pull["body"]
    [progress] = progress_comments(double)
    assert "✅ Done" in progress["body"] and second_run in progress["body"]
    bare, branch = double.bare(REPO), pull["head"]["ref"]
    assert git(bare, "log", "--format=%s", f"main..{branch}").splitlines() == [
        "feat: [US-002] - Feature 2",
        "feat: [US-001] - Feature 1",
        "feat: [US-001] - Feature 1",
    ]
    head = git(bare, "rev-parse", branch)
    checks = [r for r in double.check_runs_of(REPO) if r["head_sha"] == head]
    assert [(r["status"], r["conclusion"]) for r in checks] == [("completed", "success")]
    assert all(r["status"] == "completed" for r in double.check_runs_of(REPO))
    assert_no_secrets(double, root)
