"""Review feedback as deployed with the real Claude Code CLI as the agent: a reviewer requests
changes on reqdrive's pull request in two line-comment threads; the CLI (talking to the scripted
Messages API) answers each in an FB- story, tests first, judged by the worker; each thread gets
its commits, a reply naming them and the verdict, and is resolved through GraphQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_deployed_claude import DISCOUNT, TOTAL, claude_bin, run_to_the_end, scene
from tests.integration.test_pipeline import git
from tests.support.fake_anthropic import CWD, PRD_PATH, ToolCall, Turn, say, use
from tests.support.github_double import GitHubDouble
from tests.support.github_reviews import add_review, replies_in, resolved, review_payload
from tests.support.harness import stack, wait_for
from tests.support.leaks import assert_no_secrets

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
__all__ = ["claude_bin"]  # the session fixture, shared with test_deployed_claude

REPO = "octo/shop"
HUNK = "@@ -0,0 +1,2 @@\n+def total(prices):\n+    return sum(prices)"
THREADS: list[dict[str, Any]] = [
    {"path": "pricing.py", "line": 2, "body": "Add discount(price, rate) beside total().",
     "diff_hunk": HUNK},
    {"path": "pricing.py", "line": 1, "body": "And a tax(price) in tax.py: a fifth on top.",
     "diff_hunk": HUNK},
]  # fmt: skip
TAX = "def tax(price):\n    return price + price // 5\n"
# Each story's tests, written by its tests call and frozen by the worker before its code. The
# import is inside the test: it fails as that test, not as its module's collection.
TESTS = {
    "US-001": ("tests/test_pricing.py", "def test_total():\n    from pricing import total\n\n"
               "    assert total([2, 3]) == 5\n"),
    "FB-001": ("tests/test_discount.py", "def test_discount():\n"
               "    from pricing import discount\n\n    assert discount(10, 0.5) == 5\n"),
    "FB-002": ("tests/test_tax.py", "def test_tax():\n    from tax import tax\n\n"
               "    assert tax(100) == 120\n"),
}  # fmt: skip
TEST_IDS = {
    "FB-001": "tests.test_discount::test_discount",
    "FB-002": "tests.test_tax::test_tax",
}


def write(path: str, text: str) -> Turn:
    return use(ToolCall("Write", {"file_path": f"{CWD}/{path}", "content": text}))


def script() -> list[Turn]:
    """The model's turns in order: the plan (one story, total()), then each story's two calls,
    tests first: US-001, then FB-001 (the first thread: discount(), edited into pricing.py as
    the branch has it) and FB-002 (the second: tax.py)."""
    story = {
        "id": "US-001",
        "title": "Sum a basket",
        "description": "As a shopper I want a total",
        "acceptanceCriteria": ["total([2, 3]) is 5"],
        "priority": 1,
    }
    pricing = f"{CWD}/pricing.py"
    edit = {"file_path": pricing, "old_string": TOTAL, "new_string": TOTAL + DISCOUNT}
    return [
        use(ToolCall("Write", {"file_path": PRD_PATH, "content": json.dumps(
            {"userStories": [story]})})),
        say("Planned one story."),
        write(*TESTS["US-001"]),
        say("test_total written."),
        write("pricing.py", TOTAL),
        say("total() done."),
        write(*TESTS["FB-001"]),
        say("test_discount written."),
        use(ToolCall("Read", {"file_path": pricing})),
        use(ToolCall("Edit", edit)),
        say("discount() added."),
        write(*TESTS["FB-002"]),
        say("test_tax written."),
        write("tax.py", TAX),
        say("tax() added."),
    ]  # fmt: skip


def answered(double: GitHubDouble, threads: list[str]) -> bool:
    """Both threads resolved and the run's end reported: the PR body has FB-002's row."""
    [pull] = double.pulls_of(REPO)
    return all(resolved(double, t) for t in threads) and TEST_IDS["FB-002"] in pull["body"]


def test_a_review_with_two_threads_gets_their_commits_two_replies_two_resolved_threads(
    tmp_path: Path, double: GitHubDouble, claude_bin: Path
) -> None:
    issue, env = scene(tmp_path, double, claude_bin, tests="first")
    root = tmp_path / "stack"
    with stack(double, None, root, env, model_api=script()) as running:
        run_to_the_end(double, running, issue)
        [pull] = double.pulls_of(REPO)
        number, built = pull["number"], pull["head"]["sha"]
        review_id, threads = add_review(
            double, REPO, number, "alice", "CHANGES_REQUESTED", "", THREADS
        )
        payload = review_payload(double, REPO, number, review_id)
        assert payload["action"] == "submitted"
        assert payload["review"]["state"] == "changes_requested"
        delivered = double.deliver(running.webhook_url, "pull_request_review", payload)
        assert delivered.status_code == 202
        try:
            wait_for(lambda: answered(double, threads), 300, "both threads answered, the PR too")
        except AssertionError:
            raise AssertionError(running.logs()[-6000:]) from None
        requests = running.model_requests()
        calls = double.requests_made()

    prompts = [r.prompt() for r in requests]
    assert len(prompts) == len(script())
    # Each FB story's calls carry its thread: the file, the line, the hunk, the reviewer's words.
    for story, start, thread in (("FB-001", 6, THREADS[0]), ("FB-002", 11, THREADS[1])):
        for prompt in (prompts[start], prompts[start + 2]):
            assert f"Story ID: {story}" in prompt
            assert thread["body"] in prompt and f"{thread['path']}" in prompt
        assert "+    return sum(prices)" in prompts[start]
    # The Read in FB-001's implement call saw pricing.py as US-001 left it.
    assert "sum(prices)" in json.dumps(requests[9].tool_results())

    # A thread's commits: its story's frozen tests (`test:`), then its code (`feat:`), one
    # story per thread in the order the threads were made, on top of the branch as it was.
    bare, branch = double.bare(REPO), pull["head"]["ref"]
    log = git(bare, "log", "--format=%H %s", f"{built}..{branch}").splitlines()
    commits = {subject: sha for sha, subject in (line.split(" ", 1) for line in log)}
    first, second = (
        "Answer the review thread on pricing.py line 2",
        "Answer the review thread on pricing.py line 1",
    )
    assert list(commits) == [
        f"feat: [FB-002] - {second}",
        f"test: [FB-002] - {second}",
        f"feat: [FB-001] - {first}",
        f"test: [FB-001] - {first}",
    ]
    for story, thread_id, title in (
        ("FB-001", threads[0], first),
        ("FB-002", threads[1], second),
    ):
        test_sha, feat_sha = (
            commits[f"test: [{story}] - {title}"],
            commits[f"feat: [{story}] - {title}"],
        )
        [reply] = replies_in(double, thread_id)
        assert f"**`{story}` passed** (tests {test_sha[:12]}, change {feat_sha[:12]})" in reply
        assert f"`{TEST_IDS[story]}`" in reply and "failed without the change" in reply
        path, text = TESTS[story]
        assert git(bare, "show", f"{test_sha}:{path}") == text.rstrip("\n")
    resolutions = [
        c.body["variables"]["threadId"]
        for c in calls
        if c.path.endswith("/graphql") and "resolveReviewThread" in c.body["query"]
    ]
    assert resolutions == threads  # one GraphQL resolveReviewThread per thread, none more

    [pull] = double.pulls_of(REPO)
    assert "**3 stories: 3 passed**" in pull["body"] and pull["draft"] is False
    for story, title in (("FB-001", first), ("FB-002", second)):
        # Its row: the test it added, judged fail → pass, and frozen in its `test:` commit.
        added = (
            f"- `{TEST_IDS[story]}` (added): missing → passed; without the story's change: failed"
        )
        assert added in pull["body"], pull["body"]
        frozen = commits[f"test: [{story}] - {title}"][:12]
        assert f"| {story} | `{TEST_IDS[story]}` | `{frozen}` |" in pull["body"], pull["body"]
    head = git(bare, "rev-parse", branch)
    [check] = [r for r in double.check_runs_of(REPO) if r["head_sha"] == head]
    assert (check["status"], check["conclusion"]) == ("completed", "success")
    assert all(story in json.dumps(check["output"]) for story in ("FB-001", "FB-002"))
    assert_no_secrets(double, root)
