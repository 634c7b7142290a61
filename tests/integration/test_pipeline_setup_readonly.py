"""The setup's installed environment (`.venv`, `node_modules`, `setupCache`'s folders) is
not the agent's to change: ignored by git and kept by every restore, it is what each later
check imports, on the story's parent too. In the sandbox it is bound read-only over the
writable worktree; unconfined, a call that changed it ends the run."""

from __future__ import annotations

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
from worker.confine.sandbox import Sandbox, SandboxMode, make_sandbox
from worker.exceptions import AgentError
from worker.model.state import AttemptOutcome, RunResult, StoryState

# The project's code calls an installed package; the feature is already there, so a test of
# it passes on the story's parent and proves nothing.
FEATURE = {"feature.py": "from helper import one\n\n\ndef value():\n    return one()\n"}
MARKED = {"feature.py": "# v2\n" + FEATURE["feature.py"]}
# The setup installs the package into the worktree's .venv, as `pip install` would.
SETUP = "mkdir -p .venv/lib && printf 'def one():\\n    return 1\\n' > .venv/lib/helper.py"
GATE = f"PYTHONPATH=.venv/lib {PLAIN_PYTEST}"
# Run by the agent: the installed package edited to answer 1 only when feature.py carries
# the marker (the story's commit), 0 on its parent: a test failing there, passing here.
FORGED = (
    "import pathlib\n"
    "def one():\n"
    "    source = (pathlib.Path(__file__).parents[2] / 'feature.py').read_text()\n"
    "    return 1 if '# v2' in source else 0\n"
)
PLANT = f"import pathlib; pathlib.Path('.venv/lib/helper.py').write_text({FORGED!r})"
TEST_ID = "tests.test_feature::test_value"


def scenario(tests: str) -> dict[str, Any]:
    plant = [sys.executable, "-c", PLANT]
    if tests == "first":
        attempt: dict[str, Any] = {
            "tests": {"write": REAL_TEST, "run": plant},
            "implement": {"write": MARKED},
        }
    else:
        attempt = {"write": {**MARKED, **REAL_TEST}, "run": plant}
    return {
        "plan": [{"prd": {"project": "Feature", "userStories": [story(1, "value", [])]}}],
        "stories": {"US-001": [attempt]},
    }


def config(tests: str) -> dict[str, Any]:
    return {
        "testCommand": None,
        "setup": SETUP,
        "gates": [{"name": "tests", "command": GATE}],
        "maxStoryRetries": 1,
        "tests": tests,
    }


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
@pytest.mark.parametrize("tests", ["together", "first"])
def test_an_agent_cannot_edit_the_installed_environment_to_fake_a_failure_on_the_parent(
    make_project: MakeProject, tmp_path: Path, tests: str
) -> None:
    agent_io = tmp_path / "agent-io"
    agent_io.mkdir()
    app = make_sandbox(SandboxMode.ON, readonly=[Path(sys.prefix), Path(sys.base_prefix), SUPPORT])
    assert app is not None
    sandbox: Sandbox = app.bind(writable=[agent_io])
    project = make_project(config(tests), files=FEATURE)
    result = run_sandboxed(project, agent_io, sandbox, scenario(tests), gate_path=GATE_PATH)
    assert_judged_on_the_real_code(result, tests)


def assert_judged_on_the_real_code(result: RunResult, tests: str) -> None:
    [record] = result.stories
    [first] = record.attempts
    assert record.state is not StoryState.PASSED
    if tests == "first":
        assert first.outcome is AttemptOutcome.TESTS_REFUSED
        assert f"{TEST_ID} passes without the story's code, so it proves nothing" in first.reason
        return
    [added] = [c for c in first.tests if c.added]
    assert (added.at_parent, added.after) == ("passed", "passed")
    assert first.outcome is AttemptOutcome.GATES_FAILED
    assert f"{TEST_ID} passes without the story's change too" in first.reason


@pytest.mark.parametrize("tests", ["together", "first"])
def test_unconfined_a_call_that_edits_the_installed_environment_ends_the_run(
    make_project: MakeProject, tests: str
) -> None:
    project = make_project(config(tests), files=FEATURE)
    with pytest.raises(AgentError, match=r"changed the setup's installed environment \(\.venv\)"):
        project.run(project.scenario(scenario(tests)), gate_path=GATE_PATH)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
def test_the_storys_code_run_by_the_checks_cannot_edit_the_installed_environment_either(
    make_project: MakeProject, tmp_path: Path
) -> None:
    # Not the agent's call this time: the story's test, when the checks import it, forges
    # the installed package, which the check on the story's parent then imports.
    agent_io = tmp_path / "agent-io"
    agent_io.mkdir()
    app = make_sandbox(SandboxMode.ON, readonly=[Path(sys.prefix), Path(sys.base_prefix), SUPPORT])
    assert app is not None
    sandbox: Sandbox = app.bind(writable=[agent_io])
    planting_test = {
        "tests/test_feature.py": PLANT.replace("; ", "\n")
        + "\nfrom feature import value\n\n\ndef test_value():\n    assert value() == 1\n"
    }
    attempt = {"write": {**MARKED, **planting_test}}
    data = {
        "plan": [{"prd": {"project": "Feature", "userStories": [story(1, "value", [])]}}],
        "stories": {"US-001": [attempt]},
    }
    project = make_project(config("together"), files=FEATURE)
    result = run_sandboxed(project, agent_io, sandbox, data, gate_path=GATE_PATH)
    [record] = result.stories
    assert record.state is not StoryState.PASSED, record.attempts[-1].reason
