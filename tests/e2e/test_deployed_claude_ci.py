"""Red CI as deployed with the real Claude Code CLI as the agent: GitHub Actions fails on a
reqdrive PR's head with a test the worker reproduces; the CLI (talking to the scripted Messages
API) fixes it in a CI-fix story judged fail → pass; CI green is said once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_deployed_claude import (
    DISCOUNT,
    TEST_IDS,
    TOTAL,
    claude_bin,
    run_to_the_end,
    scene,
)
from tests.integration.test_pipeline import git
from tests.support.fake_anthropic import CWD, PRD_PATH, ToolCall, Turn, say, use
from tests.support.github_ci import CiJob, add_workflow_run, workflow_run_payload
from tests.support.github_double import GitHubDouble
from tests.support.harness import Stack, stack, wait_for
from tests.support.leaks import assert_no_secrets

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
__all__ = ["claude_bin"]  # the session fixture, shared with test_deployed_claude

REPO = "octo/shop"
CI_LOG = (
    "2024-05-01T10:00:03.0000000Z E       ImportError: cannot import name 'discount'\n"
    "2024-05-01T10:00:04.0000000Z FAILED tests/test_pricing.py::test_discount - ImportError\n"
    "2024-05-01T10:00:04.0000000Z ##[error]Process completed with exit code 1.\n"
)


def script() -> list[Turn]:
    """The plan builds total() only; CI then fails on test_discount, and the CI-fix story's
    call reads pricing.py and adds discount()."""
    story = {
        "id": "US-001",
        "title": "Sum a basket",
        "description": "As a shopper I want a total",
        "acceptanceCriteria": [f"{TEST_IDS['total']} passes"],
        "priority": 1,
        "tests": [TEST_IDS["total"]],
    }
    pricing = f"{CWD}/pricing.py"
    edit = {"file_path": pricing, "old_string": TOTAL, "new_string": TOTAL + DISCOUNT}
    plan = json.dumps({"userStories": [story]})
    return [
        use(ToolCall("Write", {"file_path": PRD_PATH, "content": plan})),
        say("Planned one story."),
        use(ToolCall("Write", {"file_path": pricing, "content": TOTAL})),
        say("total() done."),
        use(ToolCall("Read", {"file_path": pricing})),
        use(ToolCall("Edit", edit)),
        say("discount() added: CI's failing test passes."),
    ]


def workflow(running: Stack, double: GitHubDouble, pull: dict[str, Any], job: CiJob) -> None:
    head, branch = pull["head"]["sha"], pull["head"]["ref"]
    run = add_workflow_run(double, REPO, head_sha=head, branch=branch, name="CI", jobs=[job])
    payload = workflow_run_payload(double, REPO, run, pulls=[pull["number"]], sender="alice")
    assert double.deliver(running.webhook_url, "workflow_run", payload).status_code == 202


def test_ci_failing_on_a_test_the_worker_reproduces_is_fixed_by_claude_then_green(
    tmp_path: Path, double: GitHubDouble, claude_bin: Path
) -> None:
    issue, env = scene(tmp_path, double, claude_bin)
    root = tmp_path / "stack"
    with stack(double, None, root, env, model_api=script()) as running:
        run_to_the_end(double, running, issue)
        [pull] = double.pulls_of(REPO)
        built = pull["head"]["sha"]
        workflow(running, double, pull, CiJob("tests", "failure", log=CI_LOG))
        try:
            wait_for(lambda: "CI-001" in pull["body"] and pull["head"]["sha"] != built, 180, "fix")
            fixed = pull["head"]["sha"]
            workflow(running, double, pull, CiJob("tests", "success", log="3 passed\n"))
            number = pull["number"]
            wait_for(
                lambda: any("CI is green" in c["body"] for c in double.comments_on(REPO, number)),
                60,
                "green said",
            )
        except AssertionError:
            raise AssertionError(running.logs()[-6000:]) from None
        requests = running.model_requests()

    prompts = [r.prompt() for r in requests]
    assert len(prompts) == len(script())
    ci_prompt = prompts[4]
    assert "Story ID: CI-001" in ci_prompt
    assert "FAILED tests/test_pricing.py::test_discount" in ci_prompt  # CI's own words
    assert "##[error]" in ci_prompt
    bare = double.bare(REPO)
    assert git(bare, "log", "--format=%s", f"{built}..{fixed}").splitlines() == [
        "feat: [CI-001] - Make the failing CI checks pass: tests"
    ]
    # Reproduced by the worker's own checks, then judged fail → pass.
    assert f"- `{TEST_IDS['discount']}` (owned): failed → passed" in pull["body"]
    assert_no_secrets(double, root)
