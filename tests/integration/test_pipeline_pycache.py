"""Bytecode the agent leaves in an ignored __pycache__/ never stands in for the source: each
gate run's Python keeps its bytecode in a fresh folder of the worker's (PYTHONPYCACHEPREFIX)."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_pipeline import MakeProject, project_factory
from tests.integration.test_pipeline_judging import GATE_PATH, REAL_TEST, story
from tests.integration.test_pipeline_sandbox import SUPPORT
from tests.integration.test_pipeline_sandbox import run as run_sandboxed
from tests.support.pytest_command import PLAIN_PYTEST
from worker.confine.redact import Redactor
from worker.confine.sandbox import Sandbox, SandboxMode, make_sandbox
from worker.model.gates import GateSpec
from worker.model.state import AttemptOutcome, RunResult, StoryState
from worker.verdict.gates import run_gates

# The feature is already there: a test of it passes on the story's parent and proves nothing.
FEATURE = {"feature.py": "def value():\n    return 1\n"}
# The story's "change": a marker only.
MARKED = {"feature.py": "# v2\ndef value():\n    return 1\n"}
# Compiled as feature.py's bytecode: the source as it is when it carries the marker (the
# story's commit), a broken value() when not (its parent).
FORGED = (
    "import pathlib\n"
    "_source = pathlib.Path(__file__).read_text()\n"
    "if '# v2' in _source:\n"
    "    exec(compile(_source, __file__, 'exec'))\n"
    "else:\n"
    "    def value():\n"
    "        return 0\n"
)
# Run by the agent in the worktree: bytecode never checked against its source (unchecked
# hash), where Python looks for feature.py's, in a folder .gitignore hides from the change.
PLANT = (
    "import pathlib, py_compile, sys\n"
    f"pathlib.Path('forged.tmp').write_text({FORGED!r})\n"
    "py_compile.compile('forged.tmp', cfile=f'__pycache__/feature.{sys.implementation.cache_tag}"
    ".pyc', dfile='feature.py', doraise=True,"
    " invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)\n"
    "pathlib.Path('forged.tmp').unlink()\n"
)
TEST_ID = "tests.test_feature::test_value"


def scenario(tests: str) -> dict[str, Any]:
    """The story: its test, feature.py marked, and the bytecode planted by the call whose
    proof it fakes (with `tests: first`, the tests call: its test must fail without the code)."""
    if tests == "first":
        attempt: dict[str, Any] = {
            "tests": {"write": REAL_TEST, "run": [sys.executable, "-c", PLANT]},
            "implement": {"write": MARKED},
        }
    else:
        attempt = {"write": {**MARKED, **REAL_TEST}, "run": [sys.executable, "-c", PLANT]}
    return {
        "plan": [{"prd": {"project": "Feature", "userStories": [story(1, "value", [])]}}],
        "stories": {"US-001": [attempt]},
    }


def config(tests: str) -> dict[str, Any]:
    return {
        "testCommand": None,
        "gates": [{"name": "tests", "command": PLAIN_PYTEST}],
        "maxStoryRetries": 1,
        "tests": tests,
    }


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def assert_not_fooled(result: RunResult, tests: str) -> None:
    [record] = result.stories
    [first] = record.attempts
    assert record.state is not StoryState.PASSED
    if tests == "first":  # the test ran against feature.py's source, not the planted bytecode
        assert first.outcome is AttemptOutcome.TESTS_REFUSED
        assert f"{TEST_ID} passes without the story's code, so it proves nothing" in first.reason
        return
    [added] = [c for c in first.tests if c.added]
    # On the parent the test ran against feature.py's source, not the planted bytecode.
    assert (added.at_parent, added.after) == ("passed", "passed")
    assert first.outcome is AttemptOutcome.GATES_FAILED
    assert f"{TEST_ID} passes without the story's change too" in first.reason


@pytest.mark.parametrize("tests", ["together", "first"])
def test_planted_bytecode_cannot_fake_a_failure_without_the_change(
    make_project: MakeProject, tests: str
) -> None:
    project = make_project(config(tests), files=FEATURE)
    result = project.run(project.scenario(scenario(tests)), gate_path=GATE_PATH)
    assert_not_fooled(result, tests)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
@pytest.mark.parametrize("tests", ["together", "first"])
def test_planted_bytecode_cannot_fake_a_failure_without_the_change_in_the_sandbox(
    make_project: MakeProject, tmp_path: Path, tests: str
) -> None:
    agent_io = tmp_path / "agent-io"
    agent_io.mkdir()
    app = make_sandbox(SandboxMode.ON, readonly=[Path(sys.prefix), Path(sys.base_prefix), SUPPORT])
    assert app is not None
    sandbox: Sandbox = app.bind(writable=[agent_io])
    project = make_project(config(tests), files=FEATURE)
    result = run_sandboxed(project, agent_io, sandbox, scenario(tests), gate_path=GATE_PATH)
    assert_not_fooled(result, tests)


def test_bytecode_one_gate_run_plants_is_not_what_the_next_one_runs(tmp_path: Path) -> None:
    (tmp_path / "feature.py").write_text(FEATURE["feature.py"])
    # The first gate run is the story's code, planting; the second checks the source's value.
    plant = GateSpec(name="plant", command=f"python -c {shlex.quote(PLANT)}")
    check = GateSpec(name="check", command="python -c 'import feature; exit(feature.value())'")
    results = run_gates(
        [plant, check],
        cwd=tmp_path,
        env={"PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin"},
        output_dir=tmp_path / "out",
        label="iteration-1",
        redactor=Redactor(),
        fail_fast=False,
    )
    assert (tmp_path / "__pycache__" / f"feature.{sys.implementation.cache_tag}.pyc").is_file()
    # The forged bytecode returns 0 without the marker: exit 1 is feature.py's own value().
    assert [r.exit_code for r in results] == [0, 1]
