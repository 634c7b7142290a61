"""The label run as deployed with the real Claude Code CLI as the agent: the Procfile's processes,
the GitHub double, and the scripted Messages API the CLI talks to on 127.0.0.1."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.test_pipeline import GITIGNORE, PYTEST, git
from tests.support.claude_cli import install_claude_cli
from tests.support.fake_anthropic import CWD, PRD_PATH, ToolCall, Turn, fail, say, use
from tests.support.github_double import GitHubDouble
from tests.support.harness import Stack, sandbox_readonly, sandbox_works, stack, wait_for
from tests.support.leaks import assert_no_secrets, files_under, visible_on_github

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = "octo/shop"
MODEL = "claude-sonnet-4-5"
# Not shaped like an Anthropic key, so only reqdrive's exact-value redaction could hide it.
API_KEY = "fake-anthropic-key-deployed-5c2e91"
# The feature's tests, written first and failing until the stories are done.
PRICING_TESTS = (
    "def test_total():\n    from pricing import total\n    assert total([2, 3]) == 5\n\n\n"
    "def test_discount():\n    from pricing import discount\n    assert discount(10, 0.5) == 5\n"
)
TEST_IDS = {name: f"tests.test_pricing::test_{name}" for name in ("total", "discount")}
TOTAL = "def total(prices):\n    return sum(prices)\n"
# How the progress comment begins its status line once the run has ended, however it ended.
FINAL_STATUSES = ("✅ Done", "🟡 Finished", "❌ Stopped", "⏹️ Cancelled")
DISCOUNT = "\n\ndef discount(price, rate):\n    return price * (1 - rate)\n"


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    return install_claude_cli()


def shop(source: Path, *, tests: str = "together") -> None:
    """A Python project configured for the claude runner, its pricing tests failing;
    `tests: first` (the default a repository gets) leaves them out: its stories write them."""
    # Not about the review (tests/e2e/test_claude_review.py is): the scripted API plays the
    # implementer's turns only, one agent call per story (tests and code together) unless
    # `tests` says first, and every request is checked for the configured model.
    config = {
        "testCommand": PYTEST,
        "tests": tests,
        "agent": {"runner": "claude", "model": MODEL, "timeout": 120},
        "review": "off",
    }
    files = {
        ".gitignore": GITIGNORE,
        ".github/reqdrive.yml": yaml.safe_dump(config),
        "tests/test_base.py": "def test_base():\n    assert True\n",
        **({"tests/test_pricing.py": PRICING_TESTS} if tests == "together" else {}),
    }
    for path, text in files.items():
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_text(text)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "initial"]):
        git(source, *args)


def plan() -> dict[str, Any]:
    def story(n: int, name: str, title: str) -> dict[str, Any]:
        return {
            "id": f"US-00{n}",
            "title": title,
            "description": f"As a shopper I want {name}",
            "acceptanceCriteria": [f"{TEST_IDS[name]} passes"],
            "priority": n,
            "tests": [TEST_IDS[name]],
        }

    stories = [story(1, "total", "Sum a basket"), story(2, "discount", "Apply a discount")]
    return {"project": "Shop", "userStories": stories}


def script() -> list[Turn]:
    """What the model answers, in order: the plan, then each story with real file tools.
    {prd_path} and {cwd} are filled from each request (the worker picks the folders)."""
    pricing = f"{CWD}/pricing.py"
    return [
        use(ToolCall("Write", {"file_path": PRD_PATH, "content": json.dumps(plan())})),
        say("Planned two stories."),
        use(ToolCall("Write", {"file_path": pricing, "content": TOTAL})),
        say("total() done."),
        use(ToolCall("Read", {"file_path": pricing})),
        use(
            ToolCall(
                "Edit", {"file_path": pricing, "old_string": TOTAL, "new_string": TOTAL + DISCOUNT}
            )
        ),
        say("discount() done."),
    ]


def scene(
    tmp_path: Path, double: GitHubDouble, claude_bin: Path, *, tests: str = "together"
) -> tuple[int, dict[str, str]]:
    """The shop on the double with an issue asking for pricing; the stack's environment."""
    source = tmp_path / "source"
    shop(source, tests=tests)
    double.add_repository(REPO, source)
    config = (source / ".github/reqdrive.yml").read_text()
    double.set_file(REPO, "main", ".github/reqdrive.yml", config)
    double.set_role(REPO, "alice", "write")
    issue = double.add_issue(REPO, "Pricing", "Add total() and discount() to pricing.py.")
    (tmp_path / "stack").mkdir()
    # Only documented variables: the model's key (the harness adds its URL), the CLI on PATH,
    # the toolchain the checks need; the sandbox is the default one where bubblewrap works.
    path = (str(claude_bin.parent), str(Path(sys.executable).parent), os.environ["PATH"])
    env = {
        "PATH": os.pathsep.join(path),
        "ANTHROPIC_API_KEY": API_KEY,
        "REQDRIVE_SANDBOX_READONLY": sandbox_readonly(),
        "REQDRIVE_GITHUB_REQUEST_INTERVAL_S": "0",
        "REQDRIVE_GITHUB_WRITE_INTERVAL_S": "0",
    }
    if not sandbox_works():
        env["REQDRIVE_SANDBOX"] = "off"
    return issue, env


def run_to_the_end(double: GitHubDouble, running: Stack, issue: int) -> dict[str, Any]:
    """Label the issue, wait until the progress comment says the run ended; that comment."""
    payload = double.labeled_payload(REPO, issue, "reqdrive", "alice")
    assert double.deliver(running.webhook_url, "issues", payload).status_code == 202

    def progress() -> list[dict[str, Any]]:
        comments = double.comments_on(REPO, issue)
        return [c for c in comments if "reqdrive:progress" in c["body"]]

    def ended() -> bool:
        return any(end in c["body"] for c in progress() for end in FINAL_STATUSES)

    try:
        wait_for(ended, 150, "the run ended")
    except AssertionError:
        raise AssertionError(running.logs()[-6000:]) from None
    [comment] = progress()
    return comment


def test_a_key_the_model_api_refuses_stops_the_run_at_planning_saying_so(
    tmp_path: Path, double: GitHubDouble, claude_bin: Path
) -> None:
    issue, env = scene(tmp_path, double, claude_bin)
    refusals = [fail(401)] * 12  # every retry of both planning attempts
    with stack(double, None, tmp_path / "stack", env, model_api=refusals) as running:
        progress = run_to_the_end(double, running, issue)

    assert "❌ Stopped at the plan step" in progress["body"]
    # Why, as the CLI said it: not only that no plan was written.
    assert "did not write prd.json" in progress["body"]
    assert "(claude stopped (api_error): " in progress["body"] and "401" in progress["body"]
    assert double.pulls_of(REPO) == []
    assert_no_secrets(double, tmp_path / "stack")
    assert not [where for where, text in visible_on_github(double).items() if API_KEY in text]
    files = files_under(tmp_path / "stack")
    assert not [where for where, data in files.items() if API_KEY.encode() in data]


def test_label_run_with_the_real_claude_cli_opens_a_pr_with_one_commit_per_story(
    tmp_path: Path, double: GitHubDouble, claude_bin: Path
) -> None:
    issue, env = scene(tmp_path, double, claude_bin)
    root = tmp_path / "stack"
    with stack(double, None, root, env, model_api=script()) as running:
        progress = run_to_the_end(double, running, issue)
        logs = running.logs()
        requests = running.model_requests()
        journal = running.model_journal.read_text().splitlines()
        keys_matched = [json.loads(line)["authorized"] for line in journal]

    assert "✅ Done" in progress["body"], logs[-6000:]
    assert ("UNCONFINED" in logs) is not sandbox_works()

    # The CLI asked the scripted API for every turn, with the configured key and model.
    assert keys_matched == [True] * len(script())
    assert len(requests) == len(script())
    assert all(r.path.startswith("/v1/messages") for r in requests)
    assert {r.body["model"] for r in requests} == {MODEL}
    prompts = [r.prompt() for r in requests]
    assert "Add total() and discount() to pricing.py." in prompts[0]
    assert all(TEST_IDS[name] in prompts[0] for name in TEST_IDS)
    assert "Story ID: US-001" in prompts[2] and "Sum a basket" in prompts[2]
    assert "Story ID: US-002" in prompts[4] and "Apply a discount" in prompts[4]
    # The Read answered with the file US-001 left; the Edit went through.
    assert "sum(prices)" in json.dumps(requests[5].tool_results())

    [pull] = double.pulls_of(REPO)
    bare = double.bare(REPO)
    branch = pull["head"]["ref"]
    assert git(bare, "log", "--format=%s", f"main..{branch}").splitlines() == [
        "feat: [US-002] - Apply a discount",
        "feat: [US-001] - Sum a basket",
    ]
    assert pull["draft"] is False
    # The PR body's verification: each story's own test went from failing to passing.
    assert "**2 stories: 2 passed**" in pull["body"] and "**Ready for review**" in pull["body"]
    for name in TEST_IDS:
        assert f"- `{TEST_IDS[name]}` (owned): failed → passed" in pull["body"]
    head = git(bare, "rev-parse", branch)
    checks = [r for r in double.check_runs_of(REPO) if r["head_sha"] == head]
    assert [(r["status"], r["conclusion"]) for r in checks] == [("completed", "success")]

    clone = tmp_path / "fresh"
    token = double.issue_token(double.installation_of(REPO))
    basic = f"http.extraHeader=Authorization: Basic {basic_credential(token)}"
    git(
        tmp_path,
        "-c",
        basic,
        "clone",
        "-q",
        "--branch",
        branch,
        double.repos[REPO]["clone_url"],
        str(clone),
    )
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=clone, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert tests.returncode == 0, tests.stdout
    assert "3 passed" in tests.stdout

    # The model's key reached the model and nowhere else: not GitHub, logs, run folders, nor
    # the requests' bodies (the journal keeps everything but the credential headers).
    assert_no_secrets(double, root)
    assert not [where for where, text in visible_on_github(double).items() if API_KEY in text]
    assert not [where for where, data in files_under(root).items() if API_KEY.encode() in data]


def basic_credential(token: str) -> str:
    return base64.b64encode(f"x-access-token:{token}".encode()).decode()
