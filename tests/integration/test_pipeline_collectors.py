"""Cheats the worker's own collectors catch, each done by the scripted agent as a real process in
a real repository with its real runner: pytest, jest (pinned, from the npm registry) and go."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_pipeline import ONE_CALL, MakeProject, Project, project_factory
from tests.support.js_runners import install_runner
from tests.support.pytest_command import PLAIN_PYTEST
from worker.model.state import AttemptOutcome, RunResult, StoryState

PYTHON_DIR = os.path.dirname(sys.executable)
GATE_PATH = f"{PYTHON_DIR}:/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin"
PYTEST = PLAIN_PYTEST


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    # The collectors' verdicts on one call writing tests and code (tests first is
    # tests/integration/test_frozen_tests.py's).
    return project_factory(tmp_path, ONE_CALL)


def story(n: int, name: str, tests: list[str]) -> dict[str, Any]:
    return {
        "id": f"US-00{n}",
        "title": f"{name}(a, b)",
        "description": f"As a user I want {name}",
        "acceptanceCriteria": [f"{name} works"],
        "priority": n,
        "tests": tests,
    }


def run(project: Project, stories: dict[str, Any], claims: dict[str, list[str]]) -> RunResult:
    prd = {
        "project": "Calc",
        "userStories": [story(n, name, ids) for n, (name, ids) in enumerate(claims.items(), 1)],
    }
    scenario = {"plan": [{"prd": prd}], "stories": stories}
    return project.run(project.scenario(scenario), gate_path=GATE_PATH)


def pr_body(project: Project) -> str:
    return (project.run_dir() / "pr.md").read_text()


# --- pytest: a test process that forges every report ---------------------------------------

CALC_TESTS = "def test_add():\n    from add import add\n    assert add(2, 3) == 5\n"
ADD_ID = "tests.test_calc::test_add"
# Code under test that, when the tests import it, rewrites every report the worker reads
# as the process exits (reqdrive's plugin file, pytest's JUnit report) and exits 0.
FORGING_ADD = """import atexit, json, os, re


def add(a, b):
    return a - b


def _forge():
    results = os.environ.get("REQDRIVE_RESULTS")
    if results:
        records = [json.loads(line) for line in open(results)]
        with open(results, "w") as out:
            for record in records:
                if record.get("outcome") == "failed":
                    record["outcome"] = "passed"
                if record.get("event") == "finish":
                    record["exitstatus"] = 0
                out.write(json.dumps(record) + "\\n")
    for word in os.environ.get("PYTEST_ADDOPTS", "").split():
        if word.startswith("--junitxml="):
            path = word.split("=", 1)[1]
            text = re.sub(r"<failure.*?</failure>", "", open(path).read(), flags=re.S)
            open(path, "w").write(text)
    os._exit(0)


atexit.register(_forge)
"""


def test_code_that_forges_every_report_at_exit_needs_review_and_is_never_ready(
    make_project: MakeProject,
) -> None:
    project = make_project(
        {"testCommand": PYTEST, "maxStoryRetries": 1}, files={"tests/test_calc.py": CALC_TESTS}
    )
    result = run(project, {"US-001": [{"write": {"add.py": FORGING_ADD}}]}, {"add": [ADD_ID]})
    [add] = result.stories
    assert add.state is StoryState.NEEDS_REVIEW
    attempt = add.attempts[-1]
    assert attempt.outcome is AttemptOutcome.NEEDS_REVIEW
    assert attempt.reason == (
        "the worker's results disagree: gate tests: reported passed, though its test function "
        "raised: tests.test_calc::test_add (AssertionError); pytest's summary in the log says "
        "1 failed and 1 passed; the results say 0 failed and 2 passed"
    )
    assert not result.ready


JUNIT_REWRITER = """import atexit, os, re


def _rewrite():
    for word in os.environ.get("PYTEST_ADDOPTS", "").split():
        if word.startswith("--junitxml="):
            path = word.split("=", 1)[1]
            text = re.sub(r"<failure.*?</failure>", "", open(path).read(), flags=re.S)
            open(path, "w").write(text)
    os._exit(0)


atexit.register(_rewrite)
"""


def test_a_test_module_with_no_tests_that_rewrites_the_junit_report_never_passes(
    make_project: MakeProject,
) -> None:
    project = make_project(
        {"testCommand": PYTEST, "maxStoryRetries": 1}, files={"tests/test_calc.py": CALC_TESTS}
    )
    written = {"add.py": "def add(a, b):\n    return 0\n", "tests/test_zz.py": JUNIT_REWRITER}
    result = run(project, {"US-001": [{"write": written}]}, {"add": [ADD_ID]})
    [add] = result.stories
    assert add.state is not StoryState.PASSED
    assert "pytest's JUnit report and reqdrive's plugin differ on" in add.attempts[-1].reason
    assert not result.ready


# --- jest -------------------------------------------------------------------------------

PACKAGE = '{"name": "calc", "private": true, "scripts": {"test": "JEST --ci"}}\n'


def js_test(name: str, expected: int) -> str:
    return (
        f"let {name} = null;\n"
        f"try {{ {name} = require('./{name}'); }} catch {{}}\n"
        f"describe('{name}', () => {{\n"
        f"  test('works', () => {{ expect({name}(2, 3)).toBe({expected}); }});\n"
        "});\n"
    )


EXPECTED = {"add": 5, "mul": 6}
JS_IDS = {"add": "add.test.js::add > works", "mul": "mul.test.js::mul > works"}


def js_op(name: str, body: str) -> dict[str, Any]:
    return {"write": {f"{name}.js": f"module.exports = (a, b) => {body};\n"}}


def jest_project(
    make_project: MakeProject,
    *,
    npm_test: bool = False,
    ops: tuple[str, ...] = ("add", "mul"),
    files: dict[str, str] | None = None,
) -> Project:
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    jest = install_runner("jest") / "node_modules" / ".bin" / "jest"
    command = "npm test --silent" if npm_test else f"{jest} --ci"
    return make_project(
        {"testCommand": command, "maxStoryRetries": 1},
        files={
            "package.json": PACKAGE.replace("JEST", str(jest)),
            **{f"{op}.test.js": js_test(op, EXPECTED[op]) for op in ops},
            "tests/test_base.py": None,
            **(files or {}),
        },
    )


def test_an_honest_jest_story_passes_on_its_own_tests_and_is_ready(
    make_project: MakeProject,
) -> None:
    project = jest_project(make_project)
    result = run(
        project,
        {"US-001": [js_op("add", "a + b")], "US-002": [js_op("mul", "a * b")]},
        {"add": [JS_IDS["add"]], "mul": [JS_IDS["mul"]]},
    )
    assert [s.state for s in result.stories] == [StoryState.PASSED] * 2
    [check] = [c for c in result.stories[0].attempts[-1].tests if c.owned]
    assert (check.id, check.before, check.after) == (JS_IDS["add"], "failed", "passed")
    assert result.ready


def test_a_skipped_jest_test_does_not_pass_its_story(make_project: MakeProject) -> None:
    # The plan claims no test (as a plan may), and the story skips the one that fails.
    project = jest_project(make_project, ops=("add",))
    skipped = js_test("add", 5).replace("  test('works'", "  test.skip('works'")
    written = {"add.test.js": skipped, "add.js": "module.exports = () => 0;\n"}
    result = run(project, {"US-001": [{"write": written}]}, {"add": []})
    [add] = result.stories
    assert add.state is not StoryState.PASSED
    assert add.attempts[-1].outcome is AttemptOutcome.GATES_FAILED
    assert f"{JS_IDS['add']} is skipped" in add.attempts[-1].reason
    assert not result.ready


def test_npm_test_gives_no_per_test_results_so_a_story_is_unverified_never_ready(
    make_project: MakeProject,
) -> None:
    # The story deletes its test's assertion and implements nothing: with `npm test`, only
    # the exit code is seen, and it is green.
    project = jest_project(make_project, npm_test=True, ops=("add",))
    gutted = "describe('add', () => {\n  test('works', () => {});\n});\n"
    result = run(project, {"US-001": [{"write": {"add.test.js": gutted}}]}, {"add": []})
    [add] = result.stories
    assert add.state is not StoryState.PASSED
    assert not result.ready
    said = add.attempts[-1].reason + (result.draft_reason or "")
    assert "for jest, set `testCommand: npx jest --ci` in .github/reqdrive.yml" in said


# --- go ---------------------------------------------------------------------------------

GO_TEST = """package calc

import "testing"

func TestMul(t *testing.T) {
	if got := Mul(2, 3); got != 6 {
		t.Fatalf("Mul(2, 3) = %d, want 6", got)
	}
}
"""
GO_STUB = "package calc\n\nfunc Mul(a, b int) int {\n\treturn 0\n}\n"
GO_ID = "example.com/calc::TestMul"


def go_project(make_project: MakeProject) -> Project:
    if shutil.which("go") is None:
        pytest.skip("go is not installed")
    return make_project(
        {"testCommand": "go test ./...", "maxStoryRetries": 1},
        files={
            "go.mod": "module example.com/calc\n\ngo 1.19\n",
            "calc_test.go": GO_TEST,
            "calc.go": GO_STUB,
            "tests/test_base.py": None,
        },
    )


def test_an_honest_go_story_passes_on_its_own_test_and_is_ready(
    make_project: MakeProject,
) -> None:
    project = go_project(make_project)
    fixed = GO_STUB.replace("return 0", "return a * b")
    result = run(project, {"US-001": [{"write": {"calc.go": fixed}}]}, {"mul": [GO_ID]})
    [mul] = result.stories
    assert mul.state is StoryState.PASSED
    [check] = [c for c in mul.attempts[-1].tests if c.owned]
    assert (check.id, check.before, check.after) == (GO_ID, "failed", "passed")
    assert result.ready


def test_t_skip_in_go_does_not_pass_its_story(make_project: MakeProject) -> None:
    project = go_project(make_project)
    skipped = GO_TEST.replace("\tif got", '\tt.Skip("later")\n\tif got')
    # The plan claims no test (as a plan may), and the story skips the one that fails.
    result = run(project, {"US-001": [{"write": {"calc_test.go": skipped}}]}, {"mul": []})
    [mul] = result.stories
    assert mul.state is not StoryState.PASSED
    assert f"{GO_ID} is skipped" in mul.attempts[-1].reason
    assert not result.ready
