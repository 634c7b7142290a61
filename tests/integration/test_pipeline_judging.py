"""A story passes only when its own tests prove it: fail-to-pass and pass-to-pass per test id."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_pipeline import MakeProject, Project, project_factory
from tests.integration.test_pipeline_sandbox import SUPPORT
from tests.integration.test_pipeline_sandbox import run as run_sandboxed
from tests.support.pytest_command import PLAIN_PYTEST
from worker.confine.sandbox import SandboxMode, make_sandbox
from worker.model.state import AttemptOutcome, RunResult, StoryState

PYTHON_DIR = os.path.dirname(sys.executable)
# The operator's interpreter comes first on the checks' PATH: `python` is the one with pytest.
GATE_PATH = f"{PYTHON_DIR}:/usr/bin:/bin"
PLAIN_PYTEST = PLAIN_PYTEST
JUNIT_PYTEST = f"{PLAIN_PYTEST} --junitxml=$REQDRIVE_JUNIT_XML"
# The requirement arrives with its tests already written and failing (test-first).
CALC_TESTS = (
    "def test_add():\n    from add import add\n    assert add(2, 3) == 5\n\n\n"
    "def test_sub():\n    from sub import sub\n    assert sub(3, 1) == 2\n\n\n"
    "def test_mul():\n    from mul import mul\n    assert mul(2, 3) == 6\n"
)
TEST_IDS = {name: f"tests.test_calc::test_{name}" for name in ("add", "sub", "mul")}
OPS = {"add": "a + b", "sub": "a - b", "mul": "a * b"}


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def calc_project(
    make_project: MakeProject,
    *,
    junit: bool = False,
    config: dict[str, Any] | None = None,
    files: dict[str, str | None] | None = None,
) -> Project:
    gate: dict[str, Any] = {"name": "tests", "command": JUNIT_PYTEST if junit else PLAIN_PYTEST}
    if junit:
        gate["junit"] = True
    return make_project(
        {"testCommand": None, "gates": [gate], **(config or {})},
        files={"tests/test_calc.py": CALC_TESTS, **(files or {})},
    )


def story(n: int, name: str, tests: list[str]) -> dict[str, Any]:
    return {
        "id": f"US-00{n}",
        "title": f"{name}(a, b)",
        "description": f"As a user I want {name}",
        "acceptanceCriteria": [f"{name} works"],
        "priority": n,
        "tests": tests,
    }


def calc_prd(**claims: list[str]) -> dict[str, Any]:
    stories = [
        story(n, name, claims.get(name, [TEST_IDS[name]]))
        for n, name in enumerate(("add", "sub", "mul"), start=1)
    ]
    return {"project": "Calc", "userStories": stories}


def op(name: str, body: str | None = None) -> dict[str, Any]:
    return {"write": {f"{name}.py": f"def {name}(a, b):\n    return {body or OPS[name]}\n"}}


def run(project: Project, scenario: dict[str, Any]) -> RunResult:
    return project.run(project.scenario(scenario), gate_path=GATE_PATH)


def pr_body(project: Project) -> str:
    return (project.run_dir() / "pr.md").read_text()


def prompt(project: Project, iteration: int) -> str:
    return (project.run_dir() / f"iteration-{iteration}.prompt.md").read_text()


@pytest.mark.parametrize("junit", [True, False], ids=["junit-configured", "pytest-without-asking"])
def test_a_wrong_first_attempt_fails_on_its_own_test_is_retried_with_it_and_passes(
    make_project: MakeProject, junit: bool
) -> None:
    project = calc_project(make_project, junit=junit)
    result = run(
        project,
        {
            "plan": [{"prd": calc_prd()}],
            "stories": {
                "US-001": [op("add")],
                "US-002": [op("sub", "a - b + 1"), op("sub")],
                "US-003": [op("mul")],
            },
        },
    )

    assert [s.state for s in result.stories] == [StoryState.PASSED] * 3
    sub = result.stories[1]
    assert [a.outcome for a in sub.attempts] == [
        AttemptOutcome.GATES_FAILED,
        AttemptOutcome.PASSED,
    ]
    assert sub.attempts[0].reason == f"{TEST_IDS['sub']} still fails"
    [check] = [c for c in sub.attempts[1].tests if c.owned]
    assert (check.id, check.before, check.after) == (TEST_IDS["sub"], "failed", "passed")
    # The retry's prompt carries its own test's failure, word for word from the test run.
    retry = prompt(project, 3)
    assert "Attempt: 2 of 3" in retry
    assert f"{TEST_IDS['sub']} still fails" in retry
    assert "assert 3 == 2" in retry
    assert result.ready and result.fixed_tests == sorted(TEST_IDS.values())
    body = pr_body(project)
    assert "**Ready for review**" in body
    assert "3 stories: 3 passed" in body
    # The planning prompt listed the baseline's failing tests, so the plan could claim them.
    plan_prompt = (project.run_dir() / "iteration-plan-1.prompt.md").read_text()
    assert all(f"- `{t}`" in plan_prompt for t in TEST_IDS.values())


def test_a_story_whose_own_test_still_fails_is_not_passed_even_if_it_breaks_nothing(
    make_project: MakeProject,
) -> None:
    project = calc_project(make_project)
    result = run(
        project,
        {
            "plan": [{"prd": calc_prd()}],
            "stories": {
                "US-001": [op("add")],
                "US-002": [op("sub", "a - b + 1")],
                "US-003": [op("mul")],
            },
        },
    )

    states = [s.state for s in result.stories]
    assert states == [StoryState.PASSED, StoryState.FAILED, StoryState.PASSED]
    assert len(result.stories[1].attempts) == 3 and result.stories[1].commit is None
    assert not result.ready
    assert result.still_failing == {TEST_IDS["sub"]: "US-002 owns it and ended failed"}
    body = pr_body(project)
    assert "3 stories: 2 passed, 1 failed" in body
    assert f"`{TEST_IDS['sub']}`: US-002 owns it and ended failed" in body


def test_a_claim_of_a_test_that_does_not_exist_is_refused_and_planning_retried(
    make_project: MakeProject,
) -> None:
    project = calc_project(make_project)
    bogus = calc_prd(mul=["tests.test_calc::test_div"])
    result = run(
        project,
        {
            "plan": [{"prd": bogus}, {"prd": calc_prd()}],
            "stories": {name_id: [op(name)] for name_id, name in _ids().items()},
        },
    )

    second = (project.run_dir() / "iteration-plan-2.prompt.md").read_text()
    assert "## Your previous attempt was refused" in second
    assert "claims test 'tests.test_calc::test_div', which the checks did not report" in second
    assert result.stories[2].tests == [TEST_IDS["mul"]]
    assert result.ready


def _ids() -> dict[str, str]:
    return {"US-001": "add", "US-002": "sub", "US-003": "mul"}


def test_a_baseline_failure_no_story_claims_stays_a_final_check(
    make_project: MakeProject,
) -> None:
    project = calc_project(make_project)
    result = run(
        project,
        {
            "plan": [{"prd": calc_prd(mul=[])}],
            "stories": {"US-001": [op("add")], "US-002": [op("sub")], "US-003": [{}]},
        },
    )
    assert result.unclaimed_tests == [TEST_IDS["mul"]]
    assert result.still_failing == {
        TEST_IDS["mul"]: "failed before the run and no story claimed it"
    }
    assert not result.ready
    assert "no story claimed it" in pr_body(project)
    progress = (project.run_dir() / "progress.txt").read_text()
    assert f"no story claims 1 failing tests; they stay final checks: {TEST_IDS['mul']}" in progress


# Stories on a repository whose tests pass: the tests a story adds must prove it ------------

FEATURE = {"feature.py": "def value():\n    return 1\n"}
REAL_TEST = {
    "tests/test_feature.py": (
        "from feature import value\n\n\ndef test_value():\n    assert value() == 1\n"
    )
}
HOLLOW_TEST = {"tests/test_feature.py": "def test_value():\n    assert True\n"}


def one_story_prd() -> dict[str, Any]:
    return {"project": "Feature", "userStories": [story(1, "value", [])]}


@pytest.mark.parametrize("tests", ["together", "first"])
def test_a_test_that_passes_without_the_change_proves_nothing(
    make_project: MakeProject, tests: str
) -> None:
    project = make_project({"tests": tests})
    result = run(
        project,
        {
            "plan": [{"prd": one_story_prd()}],
            "stories": {
                "US-001": [
                    {"write": {**FEATURE, **HOLLOW_TEST}},
                    {"write": {**FEATURE, **REAL_TEST}},
                ]
            },
        },
    )

    [record] = result.stories
    first, second = record.attempts
    if tests == "first":  # refused by its tests call, before any code was written
        assert first.outcome is AttemptOutcome.TESTS_REFUSED
        said = (
            "tests.test_feature::test_value passes without the story's code, so it proves nothing"
        )
        assert said in first.reason
    else:
        assert first.outcome is AttemptOutcome.GATES_FAILED
        said = "tests.test_feature::test_value passes without the story's change too"
        assert said in first.reason
        [added] = [c for c in first.tests if c.added]
        assert (added.before, added.at_parent, added.after) == ("missing", "passed", "passed")
    assert second.outcome is AttemptOutcome.PASSED
    [added] = [c for c in second.tests if c.added]
    assert (added.at_parent, added.after) == ("failed", "passed")
    assert record.state is StoryState.PASSED and result.ready


@pytest.mark.parametrize(
    ("weakening", "problem"),
    [
        (
            {"delete": ["tests/test_base.py"]},
            "tests.test_base::test_base was deleted or deselected",
        ),
        (
            {
                "write": {
                    "tests/test_base.py": "import pytest\n\n\n@pytest.mark.skip\n"
                    "def test_base():\n    assert True\n"
                }
            },
            "tests.test_base::test_base was rewritten by the story",
        ),
        (
            {
                "write": {
                    "pytest.ini": "[pytest]\naddopts = --deselect tests/test_base.py::test_base\n"
                }
            },
            "tests.test_base::test_base was deleted or deselected",
        ),
    ],
    ids=["deleted", "skipped", "deselected"],
)
def test_a_story_that_weakens_a_passing_test_is_not_passed_and_the_pr_says_so(
    make_project: MakeProject, weakening: dict[str, Any], problem: str
) -> None:
    # One call writing tests and code: the checks on rewritten and missing tests (with tests
    # first, such a change is refused or reverted instead: tests/integration/test_frozen_tests.py).
    project = make_project({"maxStoryRetries": 1, "tests": "together"})
    steps = {"write": {**FEATURE, **REAL_TEST, **weakening.get("write", {})}}
    steps |= {k: v for k, v in weakening.items() if k != "write"}
    result = run(project, {"plan": [{"prd": one_story_prd()}], "stories": {"US-001": [steps]}})

    [record] = result.stories
    assert record.state is StoryState.FAILED
    assert problem in record.attempts[0].reason
    assert not result.ready
    assert problem in pr_body(project)


def test_a_gate_script_replaced_with_exit_0_is_not_a_pass(make_project: MakeProject) -> None:
    # The gate is a script of the repository; the story "fixes" its test by replacing it.
    project = calc_project(
        make_project,
        config={"testCommand": "bash tests/run.sh", "gates": [], "maxStoryRetries": 1},
        files={"tests/run.sh": f"set -e\n{PLAIN_PYTEST}\n"},
    )
    result = run(
        project,
        {
            "plan": [{"prd": calc_prd()}],
            "stories": {
                "US-001": [{"write": {"tests/run.sh": "exit 0\n", "add.py": "broken = True\n"}}],
                "US-002": [op("sub")],
                "US-003": [op("mul")],
            },
        },
    )
    first = result.stories[0]
    assert first.state is not StoryState.PASSED
    assert first.attempts[0].gate_changes == ["tests/run.sh"]
    assert "tests/run.sh" in first.attempts[0].reason
    assert not result.ready
    assert "tests/run.sh" in pr_body(project)


def test_a_repository_whose_tests_all_pass_at_the_start(make_project: MakeProject) -> None:
    project = make_project()
    result = run(
        project,
        {
            "plan": [{"prd": one_story_prd()}],
            "stories": {"US-001": [{"write": {**FEATURE, **REAL_TEST}}]},
        },
    )
    assert [s.state for s in result.stories] == [StoryState.PASSED]
    assert result.ready and result.still_failing == {} and result.fixed_tests == []
    body = pr_body(project)
    assert "1 story: 1 passed" in body
    assert "every test passed on the base commit" in body.lower()


def test_a_repository_with_no_tests_at_all(make_project: MakeProject) -> None:
    project = make_project(files={"tests/test_base.py": None})
    result = run(
        project,
        {
            "plan": [{"prd": one_story_prd()}],
            "stories": {"US-001": [{"write": {**FEATURE, **REAL_TEST}}]},
        },
    )
    [record] = result.stories
    assert record.state is StoryState.PASSED
    assert result.ready
    summary = json.loads((project.run_dir() / "verification-summary.json").read_text())
    assert summary["per_test_results"]
    body = pr_body(project)
    assert "no tests ran" in body


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
def test_in_the_apps_sandbox_the_judging_is_the_same(
    make_project: MakeProject, tmp_path: Path
) -> None:
    # The gates run confined too: the JUnit report comes back from the gate's own TMPDIR.
    agent_io = tmp_path / "agent-io"
    agent_io.mkdir()
    app = make_sandbox(SandboxMode.ON, readonly=[Path(sys.prefix), Path(sys.base_prefix), SUPPORT])
    assert app is not None
    sandbox = app.bind(writable=[agent_io])
    project = calc_project(make_project)
    scenario = {
        "plan": [{"prd": calc_prd()}],
        "stories": {
            "US-001": [op("add")],
            "US-002": [op("sub", "a - b + 1"), op("sub")],
            "US-003": [op("mul")],
        },
    }
    result = run_sandboxed(project, agent_io, sandbox, scenario, gate_path=GATE_PATH)
    assert [len(s.attempts) for s in result.stories] == [1, 2, 1]
    assert result.stories[1].attempts[0].reason == f"{TEST_IDS['sub']} still fails"
    assert [s.state for s in result.stories] == [StoryState.PASSED] * 3 and result.ready
