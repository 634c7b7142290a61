"""Budgets are the worker's, checked before every agent call: the run's budgetUsd and a budget
shared beyond the run (the App's monthly budget per installation), on what the runner reports."""

from __future__ import annotations

import io
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_pipeline import (
    ONE_CALL,
    MakeProject,
    Project,
    git,
    implement,
    prd,
    project_factory,
)
from worker.agents.base import AgentCall, AgentOutcome, AgentSettings
from worker.agents.command import CommandRunner
from worker.agents.pricing import price_for
from worker.confine.redact import Redactor
from worker.exceptions import BudgetReached
from worker.model.state import RunResult, StopReason, StoryState
from worker.report.console import ConsoleReporter
from worker.run.checkpoint_file import FileCheckpointStore
from worker.run.pipeline import Pipeline
from worker.run.spec import SharedBudget

BRANCH = "reqdrive/req-001-demo"


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    """Projects with the blind review off: these tests count the implement calls' cost (the
    review's own cost and budget check: tests/integration/test_pipeline_review.py). Budgets
    are counted per agent call: one per story attempt here (tests: together)."""
    return project_factory(tmp_path, {**ONE_CALL, "review": "off"})


class ReportingRunner:
    """The command runner (the scripted agent), reporting per call what a runner would:
    a cost (Claude Code's result line), tokens only, or nothing."""

    name = "reporting"

    def __init__(
        self,
        command: str,
        *,
        cost_usd: float | None = None,
        tokens: tuple[int, int] | None = None,
    ) -> None:
        settings = AgentSettings(runner="command", command=command, timeout_s=60)
        self._runner = CommandRunner(settings, redactor=Redactor(), source_env=os.environ)
        self._cost, self._tokens = cost_usd, tokens

    def run(self, call: AgentCall, *, cancel: threading.Event | None = None) -> AgentOutcome:
        outcome = self._runner.run(call, cancel=cancel)
        tokens_in, tokens_out = self._tokens or (None, None)
        return replace(
            outcome, cost_usd=self._cost, input_tokens=tokens_in, output_tokens=tokens_out
        )


class Month:
    """A SharedBudget in memory: what the App keeps in Redis per installation and month."""

    def __init__(self, limit_usd: float, spent_usd: float = 0.0) -> None:
        self.limit_usd, self.spent_usd = limit_usd, spent_usd
        self.charges: list[float] = []
        self.asked = 0

    def reached(self) -> str | None:
        self.asked += 1
        if self.spent_usd < self.limit_usd:
            return None
        return f"the month cost ${self.spent_usd:.2f} of ${self.limit_usd:.2f}"

    def charge(self, cost_usd: float) -> None:
        self.charges.append(cost_usd)
        self.spent_usd += cost_usd

    def remaining(self) -> float | None:
        return self.limit_usd - self.spent_usd


def run(
    project: Project,
    scenario: Path,
    runner: ReportingRunner,
    shared: SharedBudget | None = None,
) -> RunResult:
    extra: dict[str, Any] = {"shared_budget": shared} if shared else {}
    spec = project.spec(scenario, **extra)
    pipeline = Pipeline(
        spec,
        reporter=ConsoleReporter(io.StringIO()),
        checkpoints=FileCheckpointStore(project.work_dir / "runs"),
        runner=runner,
    )
    return pipeline.run()


def three_stories(project: Project) -> Path:
    return project.scenario(
        {
            "plan": [{"prd": prd(3)}],
            "stories": {f"US-00{n}": [implement(n)] for n in range(1, 4)},
        }
    )


def test_a_half_dollar_budget_reached_mid_run_stops_it_keeping_what_passed_pushed(
    make_project: MakeProject,
) -> None:
    project = make_project({"budgetUsd": 0.5})
    scenario = three_stories(project)
    runner = ReportingRunner(project.agent_command(scenario), cost_usd=0.3)

    result = run(project, scenario, runner)

    # plan $0.30, US-001 $0.60: spent, so US-002 never starts.
    assert project.calls() == ["plan 1", "US-001 1"]
    assert result.stop_reason is StopReason.BUDGET_SPENT
    assert [s.state for s in result.stories] == [
        StoryState.PASSED,
        StoryState.PENDING,
        StoryState.PENDING,
    ]
    assert result.cost_usd == pytest.approx(0.6)
    assert not result.ready and result.draft_reason is not None
    assert result.draft_reason.startswith("budget reached (the run's budgetUsd); 2 of 3")
    # Nothing lost: US-001's commit is on the remote branch.
    assert git(project.remote, "rev-parse", BRANCH) == result.head_sha != result.base_sha
    assert project.branch_log() == ["feat: [US-001] - Feature 1"]
    pr = (project.run_dir() / "pr.md").read_text()
    assert "Stopped because: budget reached (the run's budgetUsd)." in pr
    progress = (project.run_dir() / "progress.txt").read_text()
    assert "budget reached: this run's agent calls cost $0.60 of its budgetUsd $0.50" in progress


def test_the_budget_is_checked_before_a_second_planning_attempt(
    make_project: MakeProject,
) -> None:
    # The first plan is refused (no stories) and costs the whole budget: planning must not
    # call the agent a second time.
    project = make_project({"budgetUsd": 0.5})
    scenario = project.scenario({"plan": [{"prd": {"version": "1"}}]})
    runner = ReportingRunner(project.agent_command(scenario), cost_usd=0.6)

    with pytest.raises(BudgetReached, match="budget reached: this run's agent calls cost"):
        run(project, scenario, runner)

    assert project.calls() == ["plan 1"]


def test_a_shared_budget_already_spent_stops_the_run_before_any_agent_call(
    make_project: MakeProject,
) -> None:
    project = make_project()
    scenario = three_stories(project)
    runner = ReportingRunner(project.agent_command(scenario), cost_usd=0.3)
    month = Month(limit_usd=5.0, spent_usd=5.0)

    with pytest.raises(BudgetReached, match=r"budget reached: the month cost \$5.00 of \$5.00"):
        run(project, scenario, runner, month)

    assert project.calls() == []
    assert month.charges == []


def test_a_shared_budget_stops_the_run_between_stories_and_is_charged_every_call(
    make_project: MakeProject,
) -> None:
    project = make_project()
    scenario = three_stories(project)
    runner = ReportingRunner(project.agent_command(scenario), cost_usd=0.3)
    month = Month(limit_usd=1.0, spent_usd=0.2)  # other runs of the installation spent $0.20

    result = run(project, scenario, runner, month)

    # $0.20 + plan 0.30 + US-001 0.30 + US-002 0.30 = $1.10: US-003 never starts.
    assert project.calls() == ["plan 1", "US-001 1", "US-002 1"]
    assert month.charges == pytest.approx([0.3, 0.3, 0.3])
    assert result.stop_reason is StopReason.MONTHLY_BUDGET_SPENT
    assert [s.state for s in result.stories][:2] == [StoryState.PASSED] * 2
    assert git(project.remote, "rev-parse", BRANCH) == result.head_sha
    pr = (project.run_dir() / "pr.md").read_text()
    assert "Stopped because: budget reached (the installation's monthly budget)." in pr


def test_tokens_without_a_cost_are_priced_and_count_to_the_budget(
    make_project: MakeProject,
) -> None:
    project = make_project({"budgetUsd": 0.5, "agent": {"timeout": 60, "model": "sonnet"}})
    scenario = three_stories(project)
    # 100k tokens in, 10k out at sonnet's $3/$15: $0.45 a call.
    runner = ReportingRunner(project.agent_command(scenario), tokens=(100_000, 10_000))
    assert price_for("sonnet").of(100_000, 10_000) == pytest.approx(0.45)

    result = run(project, scenario, runner)

    assert project.calls() == ["plan 1", "US-001 1"]
    assert result.stop_reason is StopReason.BUDGET_SPENT
    assert result.cost_usd == pytest.approx(0.9)
    [story] = [s for s in result.stories if s.attempts]
    assert story.attempts[0].cost_usd == pytest.approx(0.45)
    progress = (project.run_dir() / "progress.txt").read_text()
    assert "no cost: priced at $0.4500 from reqdrive's price table" in progress


def test_a_runner_reporting_nothing_counts_zero_and_the_run_says_so(
    make_project: MakeProject,
) -> None:
    project = make_project({"budgetUsd": 0.5})
    scenario = three_stories(project)
    runner = ReportingRunner(project.agent_command(scenario))
    month = Month(limit_usd=1.0)

    result = run(project, scenario, runner, month)

    assert result.stop_reason is StopReason.ALL_STORIES_PASSED
    assert result.cost_usd == 0.0 and month.charges == [0.0] * 4
    progress = (project.run_dir() / "progress.txt").read_text()
    said = "the agent reported neither its cost nor its tokens: this call counts $0 to budgets"
    assert progress.count(said) == 4


def test_a_run_asked_for_again_gets_its_budget_anew_and_a_takeover_does_not(
    make_project: MakeProject,
) -> None:
    project = make_project({"budgetUsd": 0.5})
    scenario = project.scenario(
        {"plan": [{"prd": prd(4)}], "stories": {f"US-00{n}": [implement(n)] for n in range(1, 5)}}
    )
    runner = ReportingRunner(project.agent_command(scenario), cost_usd=0.3)

    def again(*, new_budget: bool) -> RunResult:
        pipeline = Pipeline(
            project.spec(scenario, new_budget=new_budget),
            reporter=ConsoleReporter(io.StringIO()),
            checkpoints=FileCheckpointStore(project.work_dir / "runs"),
            runner=runner,
        )
        return pipeline.run()

    first = again(new_budget=True)  # plan 0.30, US-001 0.60: stopped
    assert first.stop_reason is StopReason.BUDGET_SPENT
    taken_over = again(new_budget=False)  # a worker taking over: the same budget, spent
    assert taken_over.stop_reason is StopReason.BUDGET_SPENT
    assert project.calls() == ["plan 1", "US-001 1"]

    asked = again(new_budget=True)  # a person asks again: $0.50 more, from $0.60
    assert project.calls() == ["plan 1", "US-001 1", "US-002 1", "US-003 1"]
    assert asked.stop_reason is StopReason.BUDGET_SPENT
    assert asked.cost_usd == pytest.approx(1.2)
    assert project.branch_log() == [f"feat: [US-00{n}] - Feature {n}" for n in (1, 2, 3)]
