"""budgetUsd against the real Claude Code CLI: the cost is the one its result line reports (the
CLI prices the usage a scripted Messages API returns), and the worker stops before the call
that would start over budget, keeping what passed pushed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.integration.test_pipeline import (
    ONE_CALL,
    MakeProject,
    Project,
    git,
    prd,
    project_factory,
)
from tests.integration.test_pipeline_budget import Month
from tests.integration.test_pipeline_judging import GATE_PATH
from tests.support.claude_cli import install_claude_cli
from tests.support.fake_anthropic import (
    ToolCall,
    Turn,
    Usage,
    fake_anthropic,
    say,
    stall,
    use,
)
from worker.model.state import StopReason, StoryState

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FAKE_API_KEY = "fake-anthropic-key-budget-3c9e"
BUDGET_USD = 0.5
# Large replies, so that a few calls cost real money at the CLI's own prices.
COSTLY = Usage(input_tokens=40_000, output_tokens=2_000)


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    return install_claude_cli()


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    # The scripted model answers one agent call per story (tests: together).
    return project_factory(tmp_path, ONE_CALL)


def feature(worktree: Path, n: int) -> list[Turn]:
    files = {
        f"feature_{n}.py": f"def value():\n    return {n}\n",
        f"tests/test_feature_{n}.py": (
            f"import feature_{n}\n\n\ndef test_feature_{n}():\n"
            f"    assert feature_{n}.value() == {n}\n"
        ),
    }
    calls = [
        ToolCall("Write", {"file_path": str(worktree / p), "content": t}) for p, t in files.items()
    ]
    return [use(*calls, usage=COSTLY), say(f"feature {n} done.", usage=COSTLY)]


def script(project: Project) -> list[Turn]:
    worktree = project.work_dir / "cache" / "worktrees" / "run-1"
    handoff = project.work_dir / "handoff" / "run-1" / "prd.json"
    plan = ToolCall("Write", {"file_path": str(handoff), "content": json.dumps(prd(3))})
    return [
        use(plan, usage=COSTLY),
        say("Planned.", usage=COSTLY),
        *feature(worktree, 1),
        *feature(worktree, 2),
        *feature(worktree, 3),
    ]


def test_the_cost_claude_reports_stops_the_run_at_its_budget_with_what_passed_pushed(
    make_project: MakeProject, claude_bin: Path
) -> None:
    # Not about the review (test_claude_review.py is): the script plays the implementer's
    # turns only, so the blind review is off.
    config = {"budgetUsd": BUDGET_USD, "agent": {"model": "claude-sonnet-4-5"}, "review": "off"}
    project = make_project(config)
    env = {
        "PATH": f"{claude_bin.parent}{os.pathsep}{os.environ['PATH']}",
        "LANG": "C.UTF-8",
        "ANTHROPIC_API_KEY": FAKE_API_KEY,
        "ANTHROPIC_BASE_URL": "",
    }
    with fake_anthropic(script(project)) as server:
        env["ANTHROPIC_BASE_URL"] = server.url
        result = project.run(
            project.scenario({}),
            agent_runner="claude",
            agent_command=None,
            source_env=env,
            gate_path=GATE_PATH,
        )
        prompts = [r.prompt() for r in server.message_requests()]

    assert result.stop_reason is StopReason.BUDGET_SPENT
    tried = [s for s in result.stories if s.attempts]
    last_call = tried[-1].attempts[-1].cost_usd
    assert last_call is not None and last_call > 0  # the CLI's own figure, from its result line
    # Checked before every call: the last one started under the budget, and none after it.
    assert result.cost_usd >= BUDGET_USD > result.cost_usd - last_call
    assert len(tried) < 3 and not any("Story ID: US-003" in p for p in prompts)
    assert tried[0].state is StoryState.PASSED
    branch_log = git(project.remote, "log", "--format=%s", f"main..{result.branch}")
    assert "feat: [US-001] - Feature 1" in branch_log.splitlines()
    pr = (project.run_dir() / "pr.md").read_text()
    assert "Stopped because: budget reached (the run's budgetUsd)." in pr


def test_a_call_that_reaches_the_budget_between_its_turns_is_stopped_and_its_work_dropped(
    make_project: MakeProject, claude_bin: Path
) -> None:
    # US-001's call streams two costly replies, then waits on a model that never answers: the
    # worker prices the replies as they stream and stops the call once the run's spend with
    # them reaches the budget, not at the agent's timeout (and not at $0, the cost a call
    # stopped without its result line would otherwise count).
    project = make_project(
        {"budgetUsd": BUDGET_USD, "agent": {"model": "claude-sonnet-4-5", "timeout": 120}}
    )
    worktree = project.work_dir / "cache" / "worktrees" / "run-1"
    handoff = project.work_dir / "handoff" / "run-1" / "prd.json"
    plan = ToolCall("Write", {"file_path": str(handoff), "content": json.dumps(prd(3))})
    first, second = feature(worktree, 1)[0].tool_calls
    turns = [
        use(plan, usage=COSTLY),
        say("Planned.", usage=COSTLY),
        use(first, usage=COSTLY),
        use(second, usage=COSTLY),
        stall(),
    ]
    env = {
        "PATH": f"{claude_bin.parent}{os.pathsep}{os.environ['PATH']}",
        "LANG": "C.UTF-8",
        "ANTHROPIC_API_KEY": FAKE_API_KEY,
    }
    started = time.monotonic()
    with fake_anthropic(turns) as server:
        env["ANTHROPIC_BASE_URL"] = server.url
        result = project.run(
            project.scenario({}),
            agent_runner="claude",
            agent_command=None,
            source_env=env,
            gate_path=GATE_PATH,
        )
    took = time.monotonic() - started

    assert took < 60  # well before the agent's 120 s timeout
    assert result.stop_reason is StopReason.BUDGET_SPENT
    assert result.cost_usd >= BUDGET_USD  # the plan's $0.30 and the streamed replies
    [story] = [s for s in result.stories if s.id == "US-001"]
    assert story.state is not StoryState.PASSED
    assert result.head_sha == result.base_sha  # nothing the stopped call wrote was kept
    progress = (project.run_dir() / "progress.txt").read_text()
    assert "stopped between turns: its streamed replies priced" in progress
    pr = (project.run_dir() / "pr.md").read_text()
    assert "Stopped because: budget reached (the run's budgetUsd)." in pr


def test_the_installations_monthly_budget_stops_a_call_between_its_turns_too(
    make_project: MakeProject, claude_bin: Path
) -> None:
    # No budgetUsd: only the installation's month caps the run. Other runs spent $0.20 of its
    # $0.50; US-001's call streams costly replies and then waits on a model that never answers.
    # The month is checked between the call's turns as budgetUsd is, so the call is stopped
    # there, not at the agent's timeout, and the run says it was the monthly budget.
    project = make_project({"agent": {"model": "claude-sonnet-4-5", "timeout": 90}})
    worktree = project.work_dir / "cache" / "worktrees" / "run-1"
    handoff = project.work_dir / "handoff" / "run-1" / "prd.json"
    plan = ToolCall("Write", {"file_path": str(handoff), "content": json.dumps(prd(3))})
    first, second = feature(worktree, 1)[0].tool_calls
    turns = [
        use(plan),
        say("Planned."),
        use(first, usage=COSTLY),
        use(second, usage=COSTLY),
        use(first, usage=COSTLY),
        stall(),
    ]
    env = {
        "PATH": f"{claude_bin.parent}{os.pathsep}{os.environ['PATH']}",
        "LANG": "C.UTF-8",
        "ANTHROPIC_API_KEY": FAKE_API_KEY,
    }
    month = Month(limit_usd=BUDGET_USD, spent_usd=0.2)
    with fake_anthropic(turns) as server:
        env["ANTHROPIC_BASE_URL"] = server.url
        result = project.run(
            project.scenario({}),
            agent_runner="claude",
            agent_command=None,
            source_env=env,
            gate_path=GATE_PATH,
            shared_budget=month,
        )

    assert result.stop_reason is StopReason.MONTHLY_BUDGET_SPENT
    assert month.spent_usd >= BUDGET_USD  # the streamed replies were charged to the month
    [story] = [s for s in result.stories if s.id == "US-001"]
    assert story.state is not StoryState.PASSED
    assert result.head_sha == result.base_sha  # nothing the stopped call wrote was kept
    progress = (project.run_dir() / "progress.txt").read_text()
    assert "stopped between turns: its streamed replies priced" in progress
    pr = (project.run_dir() / "pr.md").read_text()
    assert "Stopped because: budget reached (the installation's monthly budget)." in pr
