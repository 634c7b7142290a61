"""As deployed: a story whose tests fail shows them on their lines in the `reqdrive` check run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_pipeline import git, implement
from tests.support.github_double import GitHubDouble
from tests.support.harness import stack, wait_for
from tests.support.leaks import assert_no_secrets
from tests.support.scenes import all_calls, shop

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = "octo/shop"


def test_a_failing_attempt_is_annotated_on_the_line_its_test_failed(
    tmp_path: Path, double: GitHubDouble
) -> None:
    # US-002's first attempt breaks its own test (checks run in the default sandbox); the
    # second fixes it. The check run open at that moment (on US-001's head) shows where.
    stories = {"US-001": [implement(1)], "US-002": [implement(2, correct=False), implement(2)]}
    scene = shop(tmp_path, double, REPO, stories=stories)
    root = tmp_path / "stack"
    root.mkdir()
    with stack(double, None, root, scene.env()) as running:
        payload = double.labeled_payload(REPO, scene.issue, "reqdrive", "alice")
        assert double.deliver(running.webhook_url, "issues", payload).status_code == 202

        def finished() -> bool:
            return any("✅ Done" in c["body"] for c in double.comments_on(REPO, scene.issue))

        try:
            wait_for(finished, 240, "the run finished")
        except AssertionError:
            raise AssertionError(running.logs()[-4000:]) from None
        calls = all_calls(running)

    assert calls == ["plan 1", "US-001 1", "US-002 1", "US-002 2"]
    [pull] = double.pulls_of(REPO)
    bare = double.bare(REPO)
    first, head = git(bare, "rev-list", "--reverse", f"main..{pull['head']['ref']}").split()
    by_sha = {r["head_sha"]: r for r in double.check_runs_of(REPO)}
    assert by_sha[head]["conclusion"] == "success" and by_sha[head]["_annotations"] == []
    [annotation] = by_sha[first]["_annotations"]
    assert annotation["path"] == "tests/test_feature_2.py"
    assert (annotation["start_line"], annotation["end_line"]) == (5, 5)
    assert annotation["annotation_level"] == "failure"
    assert annotation["title"] == "tests.test_feature_2::test_feature_2"
    assert annotation["message"].startswith("assert -1 == 2")
    assert by_sha[first]["conclusion"] == "neutral"  # superseded once US-002 passed
    assert_no_secrets(double, root)  # the annotation quotes test output: no credential in it
