"""Per-test judging with the real Claude Code CLI, driven by a scripted Messages API."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.integration.test_pipeline import MakeProject, Project, project_factory
from tests.integration.test_pipeline_judging import (
    GATE_PATH,
    TEST_IDS,
    calc_prd,
    calc_project,
    pr_body,
)
from tests.support.claude_cli import install_claude_cli
from tests.support.fake_anthropic import FakeAnthropic, ToolCall, Turn, fake_anthropic, say, use
from worker.model.state import AttemptOutcome, RunResult, StoryState

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FAKE_API_KEY = "fake-anthropic-key-judging-7d41"
REFUSED = "curl -s http://127.0.0.1:9/"


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    return install_claude_cli()


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def write(path: Path, text: str) -> Turn:
    return use(ToolCall("Write", {"file_path": str(path), "content": text}))


def script(project: Project) -> list[Turn]:
    """Plan three stories; US-002's first attempt is wrong, its second is right."""
    worktree = project.work_dir / "cache" / "worktrees" / "run-1"
    prd = project.work_dir / "handoff" / "run-1" / "prd.json"  # where planning hands it over
    return [
        write(prd, json.dumps(calc_prd())),
        say("Planned three stories."),
        # US-001 also tries a command outside the allowlist: refused, and the PR lists it.
        use(ToolCall("Bash", {"command": REFUSED})),
        write(worktree / "add.py", "def add(a, b):\n    return a + b\n"),
        say("add done."),
        write(worktree / "sub.py", "def sub(a, b):\n    return a - b + 1\n"),
        say("sub done."),
        write(worktree / "sub.py", "def sub(a, b):\n    return a - b\n"),
        say("sub fixed."),
        write(worktree / "mul.py", "def mul(a, b):\n    return a * b\n"),
        say("mul done."),
    ]


def run_with_claude(project: Project, server: FakeAnthropic, claude_bin: Path) -> RunResult:
    env = {
        "PATH": f"{claude_bin.parent}{os.pathsep}{os.environ['PATH']}",
        "LANG": "C.UTF-8",
        "ANTHROPIC_API_KEY": FAKE_API_KEY,
        "ANTHROPIC_BASE_URL": server.url,
    }
    scenario = project.scenario({})
    return project.run(
        scenario, agent_runner="claude", agent_command=None, source_env=env, gate_path=GATE_PATH
    )


def retry_prompt(server: FakeAnthropic) -> str:
    prompts = [r.prompt() for r in server.message_requests()]
    [retry] = {p for p in prompts if "Story ID: US-002" in p and "Attempt: 2 of 3" in p}
    return retry


@pytest.mark.parametrize("junit", [True, False], ids=["junit-configured", "pytest-without-asking"])
def test_a_wrong_story_is_retried_with_its_own_failing_test_and_the_run_ends_ready(
    make_project: MakeProject, claude_bin: Path, junit: bool
) -> None:
    # The scripted model answers one agent call per story (tests: together); tests first's
    # two calls are exercised with the scripted agent (tests/integration/test_frozen_tests.py).
    project = calc_project(make_project, junit=junit, config={"tests": "together"})
    with fake_anthropic(script(project)) as server:
        result = run_with_claude(project, server, claude_bin)
        retry = retry_prompt(server)

    assert [s.state for s in result.stories] == [StoryState.PASSED] * 3
    sub = result.stories[1]
    assert [a.outcome for a in sub.attempts] == [
        AttemptOutcome.GATES_FAILED,
        AttemptOutcome.PASSED,
    ]
    assert sub.attempts[0].reason == f"{TEST_IDS['sub']} still fails"
    # What the model was told on the retry: its own test and the assertion pytest printed.
    assert f"{TEST_IDS['sub']} still fails" in retry
    assert "assert 3 == 2" in retry
    assert result.ready
    assert result.stories[0].attempts[0].refused_tools == [f"Bash {REFUSED}"]
    body = pr_body(project)
    assert "**3 stories: 3 passed**" in body and "**Ready for review**" in body
    assert f"- `{TEST_IDS['sub']}` (owned): failed → passed" in body
    assert f"- US-001 attempt 1: refused tool call `Bash {REFUSED}`" in body
