"""reqdrive as deployed: the Procfile's web and worker processes, real Redis, git over HTTP and
the GitHub API at the double's socket, driven only by signed deliveries."""

from __future__ import annotations

import base64
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.test_pipeline import git
from tests.support.github_double import GitHubDouble
from tests.support.harness import sandbox_works, stack, wait_for
from tests.support.leaks import assert_no_secrets
from tests.support.scenes import Scene, all_calls, shop

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = "octo/shop"


def test_label_on_an_issue_opens_a_pr_with_frozen_tests_then_code_per_story(
    tmp_path: Path, double: GitHubDouble
) -> None:
    scene = shop(tmp_path, double, REPO, tests="first")
    issue = scene.issue
    root = tmp_path / "stack"
    root.mkdir()
    with stack(double, None, root, scene.env()) as running:
        payload = double.labeled_payload(REPO, issue, "reqdrive", "alice")
        assert double.deliver(running.webhook_url, "issues", payload).status_code == 202

        def finished() -> bool:
            return any("✅ Done" in c["body"] for c in double.comments_on(REPO, issue))

        try:
            wait_for(finished, 240, "the run finished")
        except AssertionError:
            raise AssertionError(running.logs()[-4000:]) from None
        calls, logs = all_calls(running), running.logs()

    # Per story its tests call, then its implement call.
    assert calls == ["plan 1", "US-001 1 tests", "US-001 1", "US-002 1 tests", "US-002 1"]
    # The default sandbox confined every agent call and check (where bubblewrap works).
    assert ("UNCONFINED" in logs) is not sandbox_works()
    [pull] = double.pulls_of(REPO)
    bare = double.bare(REPO)
    branch = pull["head"]["ref"]
    assert git(bare, "log", "--format=%s", f"main..{branch}").splitlines() == [
        "feat: [US-002] - Feature 2",
        "test: [US-002] - Feature 2",
        "feat: [US-001] - Feature 1",
        "test: [US-001] - Feature 1",
    ]
    frozen = git(bare, "rev-parse", f"{branch}~1")  # US-002's tests, frozen before its code
    assert f"`{frozen[:12]}`" in pull["body"] and "### Frozen tests" in pull["body"]
    head = git(bare, "rev-parse", branch)
    checks = [r for r in double.check_runs_of(REPO) if r["head_sha"] == head]
    assert [(r["status"], r["conclusion"]) for r in checks] == [("completed", "success")]
    assert pull["draft"] is False
    [progress] = [c for c in double.comments_on(REPO, issue) if "reqdrive:progress" in c["body"]]
    assert "✅ Done" in progress["body"]

    clone = tmp_path / "fresh"
    token = double.issue_token(double.installation_of(REPO))
    fetched = subprocess.run(
        [
            "git",
            "-c",
            f"http.extraHeader=Authorization: Basic {_basic(token)}",
            "clone",
            "-q",
            "--branch",
            branch,
            double.repos[REPO]["clone_url"],
            str(clone),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert fetched.returncode == 0, fetched.stderr
    tests = subprocess.run(
        ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=clone,
        capture_output=True,
        text=True,
        check=False,
    )
    assert tests.returncode == 0, tests.stdout

    assert_no_secrets(double, root)


def _scene(tmp_path: Path, double: GitHubDouble, *, role: str = "write") -> Scene:
    (tmp_path / "stack").mkdir()
    return shop(tmp_path, double, REPO, role=role)


def _done(double: GitHubDouble, issue: int) -> bool:
    return any("✅ Done" in c["body"] for c in double.comments_on(REPO, issue))


def test_a_delivery_twice_and_the_label_twice_make_one_run_and_one_pr(
    tmp_path: Path, double: GitHubDouble
) -> None:
    scene = _scene(tmp_path, double)
    issue = scene.issue
    with stack(double, None, tmp_path / "stack", scene.env()) as running:
        payload = double.labeled_payload(REPO, issue, "reqdrive", "alice")
        for _ in range(2):
            answer = double.deliver(running.webhook_url, "issues", payload, delivery_id="same-1")
            assert answer.status_code in (200, 202)
        again = double.labeled_payload(REPO, issue, "reqdrive", "alice")
        assert double.deliver(running.webhook_url, "issues", again).status_code in (200, 202)
        wait_for(lambda: _done(double, issue), 240, "the run finished")
        time.sleep(3)  # a second run, if one was queued, would have started by now

    assert all_calls(running) == ["plan 1", "US-001 1", "US-002 1"]
    assert len(double.pulls_of(REPO)) == 1
    progress = [c for c in double.comments_on(REPO, issue) if "reqdrive:progress" in c["body"]]
    assert len(progress) == 1
    assert_no_secrets(double, tmp_path / "stack")


def test_a_commenter_without_write_permission_gets_one_reply_and_nothing_runs(
    tmp_path: Path, double: GitHubDouble
) -> None:
    scene = _scene(tmp_path, double, role="read")
    issue = scene.issue
    with stack(double, None, tmp_path / "stack", scene.env()) as running:
        payload = double.comment_payload(REPO, issue, "/reqdrive run", "alice")
        assert double.deliver(running.webhook_url, "issue_comment", payload).status_code in (
            200,
            202,
        )
        wait_for(lambda: bool(double.comments_on(REPO, issue)), 60, "a reply")
        time.sleep(3)

    assert len(double.comments_on(REPO, issue)) == 1
    assert all_calls(running) == []
    assert double.pulls_of(REPO) == []
    assert double.pushes == []
    assert_no_secrets(double, tmp_path / "stack")


def test_the_apps_own_comment_push_and_label_trigger_nothing(
    tmp_path: Path, double: GitHubDouble
) -> None:
    scene = _scene(tmp_path, double)
    issue = scene.issue
    bot = "reqdrive[bot]"
    with stack(double, None, tmp_path / "stack", scene.env()) as running:
        deliveries = [
            ("issue_comment", double.comment_payload(REPO, issue, "/reqdrive run", bot)),
            ("issues", double.labeled_payload(REPO, issue, "reqdrive", bot)),
        ]
        for event, payload in deliveries:
            answer = double.deliver(running.webhook_url, event, payload)
            assert answer.status_code < 300
        time.sleep(5)

    assert all_calls(running) == []
    assert double.writes() == []
    assert_no_secrets(double, tmp_path / "stack")


def test_a_run_completes_with_a_fifth_of_api_calls_failing_502_and_nothing_duplicated(
    tmp_path: Path, double: GitHubDouble
) -> None:
    scene = _scene(tmp_path, double)
    issue = scene.issue
    with stack(double, None, tmp_path / "stack", scene.env()) as running:
        double.fail_some(0.2)
        payload = double.labeled_payload(REPO, issue, "reqdrive", "alice")
        assert double.deliver(running.webhook_url, "issues", payload).status_code == 202
        try:
            wait_for(lambda: _done(double, issue), 300, "the run finished")
        except AssertionError:
            raise AssertionError(running.logs()[-4000:]) from None
        double.fail_some(0.0)

    assert any(call.status == 502 for call in double.requests_made())
    assert all_calls(running) == ["plan 1", "US-001 1", "US-002 1"]
    [pull] = double.pulls_of(REPO)
    assert (
        len(
            git(double.bare(REPO), "log", "--format=%s", f"main..{pull['head']['ref']}").split("\n")
        )
        == 2
    )
    progress = [c for c in double.comments_on(REPO, issue) if "reqdrive:progress" in c["body"]]
    assert len(progress) == 1
    head = git(double.bare(REPO), "rev-parse", pull["head"]["ref"])
    checks = [r for r in double.check_runs_of(REPO) if r["head_sha"] == head]
    assert [(r["status"], r["conclusion"]) for r in checks] == [("completed", "success")]
    assert_no_secrets(double, tmp_path / "stack")


def _basic(token: str) -> str:
    return base64.b64encode(f"x-access-token:{token}".encode()).decode()
