"""`reqdrive plan` and `reqdrive run --plan FILE` as real processes on a local checkout."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.e2e.test_run_bad_input import commit_file, make_project
from tests.e2e.test_run_cli import BRANCH, REQUIREMENT, command, git, run_cli, scenario_file
from tests.integration.test_pipeline import implement, prd

pytestmark = pytest.mark.e2e


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


def plan_command(tmp_path: Path, scenario: Path, *extra: str) -> list[str]:
    argv = command(tmp_path, scenario, *extra)
    return [sys.executable, "-m", "bot.cli", "plan", *argv[3:]]


def test_plan_prints_the_stories_and_stops_before_any_story_runs(
    tmp_path: Path,
    project: Path,
) -> None:
    scenario = scenario_file(tmp_path, {"plan": [{"prd": prd(2)}], "stories": {}})
    done = run_cli(project, plan_command(tmp_path, scenario, "--run-id", "demo"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"plan for {REQUIREMENT}: 2 stories"
    assert "US-001 (priority 1) Feature 1" in lines and "US-002 (priority 2) Feature 2" in lines
    assert "  tests: none (judged on the others passing)" in lines
    assert f"next: reqdrive run {REQUIREMENT} --run-id demo" in done.stdout
    calls = (tmp_path / "calls.log").read_text()
    assert "plan 1" in calls and "US-001" not in calls  # no story was worked on
    assert "feat:" not in git(project, "log", "--all", "--format=%s")


def test_plan_json_prints_prd_json(tmp_path: Path, project: Path) -> None:
    scenario = scenario_file(tmp_path, {"plan": [{"prd": prd(1)}]})
    done = run_cli(project, plan_command(tmp_path, scenario, "--run-id", "demo", "--json"))
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert [s["id"] for s in plan["userStories"]] == ["US-001"]
    assert plan == json.loads((tmp_path / "work/runs/demo/prd.json").read_text())


def test_run_starts_from_a_reviewed_plan_instead_of_asking_the_agent(
    tmp_path: Path,
    project: Path,
) -> None:
    scenario = scenario_file(tmp_path, {"plan": [{"prd": prd(1)}]})
    assert run_cli(project, plan_command(tmp_path, scenario, "--run-id", "demo")).returncode == 0
    reviewed = json.loads((tmp_path / "work/runs/demo/prd.json").read_text())
    reviewed["userStories"][0]["title"] = "Feature 1, as reviewed"
    plan_file = tmp_path / "reviewed.json"
    plan_file.write_text(json.dumps(reviewed))
    scenario = scenario_file(
        tmp_path, {"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}}
    )
    done = run_cli(
        project, command(tmp_path, scenario, "--run-id", "demo", "--plan", str(plan_file))
    )
    assert done.returncode == 0, done.stderr
    assert (
        git(project, "log", "-1", "--format=%s", BRANCH)
        == "feat: [US-001] - Feature 1, as reviewed"
    )
    assert (tmp_path / "calls.log").read_text().count("plan ") == 1  # only `reqdrive plan` planned


@pytest.mark.parametrize(
    ("plan_text", "code", "message"),
    [
        (None, 8, "plan file {path} not found"),
        ('{"userStories": []}', 5, "userStories has 0 stories"),
        ("[" * 50_000, 5, "nested 50000 levels deep"),
    ],
)
def test_a_reviewed_plan_is_checked_like_the_agents(
    tmp_path: Path,
    project: Path,
    plan_text: str | None,
    code: int,
    message: str,
) -> None:
    path = tmp_path / "plan.json"
    if plan_text is not None:
        path.write_text(plan_text)
    scenario = scenario_file(tmp_path, {"plan": [{"prd": prd(1)}]})
    done = run_cli(project, command(tmp_path, scenario, "--plan", str(path)))
    assert done.returncode == code, done.stderr
    assert message.format(path=path) in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "calls.log").exists()  # the agent never planned


def test_plan_ends_with_the_plan_and_lists_the_failing_tests_no_story_claims(
    tmp_path: Path, project: Path
) -> None:
    commit_file(project, "tests/test_broken.py", "def test_broken():\n    assert False\n")
    scenario = scenario_file(tmp_path, {"plan": [{"prd": prd(1)}], "stories": {}})
    done = run_cli(project, plan_command(tmp_path, scenario, "--run-id", "demo"))
    assert done.returncode == 0, done.stderr
    assert "cancelled" not in done.stderr and "stopped because" not in done.stderr
    assert "planned: 1 story; no story was run" in done.stderr
    lines = done.stdout.splitlines()
    claims = lines.index(
        "no story claims 1 test failing on the base; they stay final checks, and the run "
        "ends a draft while they fail:"
    )
    assert "test_broken" in lines[claims + 1] and "test_base" not in done.stdout


@pytest.mark.parametrize("named", ["docs/requirements/REQ-001-demo", "docs/requirements/REQ-001"])
def test_a_requirement_path_without_md_plans_that_file_not_its_words(
    tmp_path: Path, project: Path, named: str
) -> None:
    commit_file(project, "docs/requirements/REQ-0010-other.md", "# REQ-0010\nAnother.\n")
    scenario = scenario_file(tmp_path, {"plan": [{"prd": prd(1)}]})
    argv = plan_command(tmp_path, scenario, "--run-id", "demo")
    argv[argv.index(REQUIREMENT)] = named
    done = run_cli(project, argv)
    assert done.returncode == 0, done.stderr
    assert f"{Path(named).name} is {REQUIREMENT}" in done.stderr
    assert done.stdout.startswith(f"plan for {REQUIREMENT}: 1 story")
    prompt = (tmp_path / "work/runs/demo/iteration-plan-1.prompt.md").read_text()
    assert f'<requirement source="{REQUIREMENT}">\n# REQ-001\nOne small feature.' in prompt
