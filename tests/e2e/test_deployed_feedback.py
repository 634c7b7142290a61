"""reqdrive as deployed: a review requesting changes on its pull request, delivered to the web
process, becomes FB- stories on the branch; each thread gets a reply, resolved only if it passed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_deployed_retry import progress, set_stories
from tests.integration.test_pipeline import git, implement
from tests.support.github_double import GitHubDouble
from tests.support.github_reviews import add_review, replies_in, resolved, review_payload
from tests.support.harness import Stack, stack, wait_for
from tests.support.leaks import assert_no_secrets
from tests.support.scenes import all_calls, shop

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = "octo/shop"


def fix(name: str, value: int, *, breaks: bool = False) -> dict[str, Any]:
    """A fix adding <name>.py (its value) and a test wanting 7; `breaks`: it also breaks
    feature_1, whose test passed before."""
    files = {
        f"{name}.py": f"def value():\n    return {value}\n",
        f"tests/test_{name}.py": (
            f"import {name}\n\n\ndef test_{name}():\n    assert {name}.value() == 7\n"
        ),
    }
    if breaks:
        files["feature_1.py"] = "def value():\n    return -1\n"
    return {"write": files}


def until(running: Stack, check: Any, what: str) -> None:
    """Wait for `check` (a loaded machine runs a sandboxed story in minutes); the logs if not."""
    try:
        wait_for(check, 600, what)
    except AssertionError:
        raise AssertionError(running.logs()[-4000:]) from None


def said(double: GitHubDouble, issue: int, text: str) -> Any:
    return lambda: any(text in c["body"] for c in progress(double, issue))


def test_a_review_gets_one_fix_per_thread_replies_and_only_the_passing_thread_resolved(
    tmp_path: Path, double: GitHubDouble
) -> None:
    scene = shop(
        tmp_path, double, REPO, stories={"US-001": [implement(1)], "US-002": [implement(2)]}
    )
    issue, root = scene.issue, tmp_path / "stack"
    root.mkdir()
    with stack(double, None, root, scene.env()) as running:
        labeled = double.labeled_payload(REPO, issue, "reqdrive", "alice")
        assert double.deliver(running.webhook_url, "issues", labeled).status_code == 202
        until(running, said(double, issue, "✅ Done"), "the first run")
        [pull] = double.pulls_of(REPO)
        number = pull["number"]
        before = all_calls(running)

        set_stories(
            scene, {"FB-001": [fix("fb_one", 7)], "FB-002": [fix("fb_two", 7, breaks=True)]}
        )
        review_id, (good, bad) = add_review(
            double, REPO, number, "alice", "CHANGES_REQUESTED", "",
            [{"path": "feature_1.py", "line": 2, "body": "Add fb_one: its value is 7."},
             {"path": "feature_2.py", "line": 1, "body": "And fb_two, also 7."}],
        )  # fmt: skip
        delivered = double.deliver(
            running.webhook_url,
            "pull_request_review",
            review_payload(double, REPO, number, review_id),
        )
        assert delivered.status_code == 202
        until(running, lambda: bool(replies_in(double, bad)), "the replies")
        until(running, said(double, issue, "Finished as a draft"), "the feedback run's end")
        calls = all_calls(running)

    assert calls[len(before) :] == ["FB-001 1", "FB-002 1", "FB-002 2", "FB-002 3"]
    [good_reply] = replies_in(double, good)
    assert "**`FB-001` passed**" in good_reply and resolved(double, good)
    [bad_reply] = replies_in(double, bad)
    assert "**`FB-002` did not pass**" in bad_reply and "test_feature_1" in bad_reply
    assert not resolved(double, bad)
    bare, branch = double.bare(REPO), pull["head"]["ref"]
    subjects = git(bare, "log", "--format=%s", f"main..{branch}").splitlines()
    assert [s for s in subjects if "FB-" in s] == [
        "feat: [FB-001] - Answer the review thread on feature_1.py line 2"
    ]
    [pull] = double.pulls_of(REPO)
    assert "FB-001" in pull["body"] and "FB-002" in pull["body"]
    assert_no_secrets(double, root)
