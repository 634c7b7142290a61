"""reqdrive as deployed, on red CI: GitHub Actions failing on a reqdrive PR's head (a signed
workflow_run delivery, its jobs and log read from the double: a 302 to the download) → a
CI-fix commit → green said once; then a person's push hands the PR off."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_pipeline import git, implement
from tests.support.github_ci import CiJob, add_workflow_run, workflow_run_payload
from tests.support.github_double import GitHubDouble
from tests.support.harness import Stack, stack, wait_for
from tests.support.leaks import assert_no_secrets
from tests.support.scenes import all_calls, shop

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = "octo/shop"
LOG = (
    "2024-05-01T10:00:01.0000000Z ##[group]Run ruff check .\n"
    "2024-05-01T10:00:02.0000000Z feature_1.py:2:5: W291 trailing whitespace\n"
    "2024-05-01T10:00:02.0000000Z ##[error]Process completed with exit code 1.\n"
)


def comments(double: GitHubDouble, number: int, text: str) -> list[str]:
    return [c["body"] for c in double.comments_on(REPO, number) if text in c["body"]]


def wait(running: Stack, check: Any, what: str) -> None:
    try:
        wait_for(check, 180, what)
    except AssertionError:
        raise AssertionError(f"{what}\n{running.logs()[-4000:]}") from None


def workflow(
    running: Stack, double: GitHubDouble, pull: dict[str, Any], job: CiJob, sender: str
) -> None:
    """GitHub Actions ran CI on the PR's head: its run on the double, its delivery signed."""
    head, branch = pull["head"]["sha"], pull["head"]["ref"]
    run = add_workflow_run(double, REPO, head_sha=head, branch=branch, name="CI", jobs=[job])
    payload = workflow_run_payload(double, REPO, run, pulls=[pull["number"]], sender=sender)
    assert double.deliver(running.webhook_url, "workflow_run", payload).status_code == 202


def test_red_ci_gets_a_fix_commit_then_green_then_a_persons_push_hands_off(
    tmp_path: Path, double: GitHubDouble
) -> None:
    scene = shop(tmp_path, double, REPO, stories={"US-001": [implement(1)]}, plan=None)
    scenario = json.loads((scene.agent_dir / "scenario.json").read_text())
    scenario["plan"][0]["prd"]["userStories"] = scenario["plan"][0]["prd"]["userStories"][:1]
    tidy = {"write": {"feature_1.py": "def value():\n    return 1\n\n\n# tidied for ruff\n"}}
    scenario["stories"]["CI-001"] = [tidy]
    (scene.agent_dir / "scenario.json").write_text(json.dumps(scenario))
    root = tmp_path / "stack"
    root.mkdir()
    with stack(double, None, root, scene.env()) as running:
        labeled = double.labeled_payload(REPO, scene.issue, "reqdrive", "alice")
        assert double.deliver(running.webhook_url, "issues", labeled).status_code == 202
        wait(running, lambda: any(p["draft"] is False for p in double.pulls_of(REPO)), "a PR")
        [pull] = double.pulls_of(REPO)
        built = pull["head"]["sha"]

        workflow(running, double, pull, CiJob("lint", "failure", log=LOG), "reqdrive[bot]")
        wait(running, lambda: pull["head"]["sha"] != built, "the CI-fix commit pushed")
        fixed = pull["head"]["sha"]
        wait(running, lambda: "CI-001" in pull["body"] and "✅" in pull["body"], "PR body")
        workflow(running, double, pull, CiJob("lint", "success", log="ok\n"), "reqdrive[bot]")
        wait(running, lambda: comments(double, pull["number"], "CI is green"), "green said")

        push = double.push_files(REPO, {"NOTES.md": "mine\n"}, "notes", branch=pull["head"]["ref"])
        payload = double.push_payload(push, "alice")
        assert double.deliver(running.webhook_url, "push", payload).status_code == 202
        pushed = pull["head"]["sha"]
        wait(running, lambda: "Job OK (handoff-" in running.logs(), "the hand-off job ran")
        workflow(running, double, pull, CiJob("lint", "failure", log=LOG), "alice")
        wait(running, lambda: comments(double, pull["number"], "theirs"), "handed off said")
        calls = all_calls(running)

    assert calls == ["plan 1", "US-001 1", "CI-001 1"]
    bare, branch = double.bare(REPO), pull["head"]["ref"]
    assert git(bare, "log", "--format=%s", f"{built}..{fixed}").splitlines() == [
        "feat: [CI-001] - Make the failing CI checks pass: lint"
    ]
    assert git(bare, "rev-parse", branch) == pushed  # reqdrive left the person's push alone
    [green] = comments(double, pull["number"], "CI is green")
    assert fixed[:12] in green
    [handed] = comments(double, pull["number"], "theirs")
    assert "`alice` pushed" in handed
    gets = [c.path for c in double.requests_made() if c.method == "GET"]
    assert any(p.endswith("/logs") for p in gets)  # the job's log, through GitHub's 302
    assert any(p.endswith("/jobs") for p in gets)
    assert_no_secrets(double, root)
