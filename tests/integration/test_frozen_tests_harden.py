"""More cheats on frozen tests, each done by the scripted agent as a real process in the App's
sandbox on a real pytest suite in a real git repository: a plugin registered by packaging
metadata, state a check leaves for the next one, a frozen test rewritten while a check runs,
bytecode forged for a frozen test, and code under test that forges pytest's reports."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.integration.test_frozen_tests import (
    BASE_TESTS,
    CALC,
    FORGING_PLUGIN,
    MUL_TEST,
    OWN_TEST,
    RIGHT_MUL,
    WRONG_MUL,
    assert_caught,
    calc_project,
    cheat,
    plan,
    run,
)
from tests.integration.test_frozen_tests_js import ADD_STUB
from tests.integration.test_pipeline import GITIGNORE, MakeProject, project_factory
from tests.integration.test_pipeline_collectors import GO_ID, JS_IDS, go_project, jest_project
from tests.integration.test_pipeline_collectors import run as collectors_run
from tests.integration.test_pipeline_judging import GATE_PATH
from tests.integration.test_pipeline_sandbox import run as run_sandboxed
from tests.support.pytest_command import PLAIN_PYTEST
from worker.confine.sandbox import Sandbox
from worker.model.state import StoryState

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


# Packaging metadata in a folder on sys.path (the worktree's top, for `python -m pytest`):
# importlib.metadata finds it, and pytest loads every `pytest11` entry point it names.
DIST_INFO = {
    "forge-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: forge\nVersion: 1.0\n",
    "forge-1.0.dist-info/entry_points.txt": "[pytest11]\nforge = forging_plugin\n",
}


def test_a_pytest_plugin_registered_by_packaging_metadata_is_reverted(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = calc_project(make_project)
    writes = {"calc.py": WRONG_MUL, "forging_plugin.py": FORGING_PLUGIN, **DIST_INFO}
    result = run(project, agent_io, sandbox, cheat({}, {"write": writes}))
    assert_caught(result, "forge-1.0.dist-info/entry_points.txt")


# pytest loads a test module's rewritten bytecode from its __pycache__ when the .pyc names
# the source's hash (pytest 9; its modification time and size before): forged, the frozen
# test never runs. The checks keep Python's bytecode outside the worktree
# (PYTHONPYCACHEPREFIX, verdict/gates.py), so neither forgery is read: regressions.
PYC_FORGER = """
def _forge_pyc(test_path):
    import importlib.util, marshal, os
    from _pytest.assertion.rewrite import PYTEST_TAG

    gutted = "def test_add():\\n    pass\\n\\n\\ndef test_mul():\\n    pass\\n"
    with open(test_path, "rb") as source:
        stamp = importlib.util.source_hash(source.read())[:8]
    folder = os.path.join(os.path.dirname(test_path), "__pycache__")
    os.makedirs(folder, exist_ok=True)
    name = os.path.basename(test_path)[:-3] + "." + PYTEST_TAG + ".pyc"
    code = marshal.dumps(compile(gutted, os.path.abspath(test_path), "exec"))
    with open(os.path.join(folder, name), "wb") as out:
        out.write(importlib.util.MAGIC_NUMBER + b"\\3\\0\\0\\0" + stamp + code)
"""


def test_bytecode_forged_for_a_frozen_test_by_the_agent_is_never_loaded(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    # The tests at the top: their __pycache__ is no test folder.
    project = make_project(
        {"testCommand": PLAIN_PYTEST, "maxStoryRetries": 1},
        {"calc.py": CALC, "test_calc.py": BASE_TESTS + MUL_TEST},
    )
    forge = [sys.executable, "-c", PYC_FORGER + "\n_forge_pyc('test_calc.py')\n"]
    prd = plan()
    prd["userStories"][0]["tests"] = ["test_calc::test_mul"]
    steps = cheat({}, {"write": {"calc.py": WRONG_MUL}, "run": forge})
    data = {"plan": [{"prd": prd}], "stories": {"US-001": steps}}
    result = run_sandboxed(project, agent_io, sandbox, data, gate_path=GATE_PATH)
    assert_caught(result)


# Code under test that, imported by a check, leaves forged bytecode for the frozen test: the
# check it runs in is honest, the next one (the story's next attempt) would not be.
PLANTING_MUL = (
    WRONG_MUL
    + PYC_FORGER
    + "\n\nimport os\n\nif os.path.exists('tests/test_calc.py'):\n"
    + "    _forge_pyc('tests/test_calc.py')\n"
)


def test_bytecode_the_story_code_forges_while_a_check_runs_is_never_loaded(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = calc_project(make_project, maxStoryRetries=2)
    story = [
        {"tests": {}, "implement": {"write": {"calc.py": PLANTING_MUL}}},
        {"tests": {}, "implement": {"write": {"calc.py": "# mul, again\n" + WRONG_MUL}}},
    ]
    result = run(project, agent_io, sandbox, story)
    assert_caught(result)
    assert len(result.stories[0].attempts) == 2


# A repository whose generated modules go to an ignored build/ folder, loaded first.
BUILD_FIRST = "import sys\n\nsys.path.insert(0, 'build')\nimport calc  # noqa: E402, F401\n"
# Code under test that, imported by a check, leaves a right mul in build/ for later checks.
PLANTING_BUILD = (
    WRONG_MUL
    + "\n\nimport os\n\nos.makedirs('build', exist_ok=True)\n"
    + f"open('build/calc.py', 'w').write({RIGHT_MUL!r})\n"
)


def test_a_file_the_story_code_writes_while_a_check_runs_is_gone_before_the_next_check(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    more = {".gitignore": GITIGNORE + "build/\n", "tests/conftest.py": BUILD_FIRST}
    project = calc_project(make_project, more=more, maxStoryRetries=2)
    story = [
        {"tests": {}, "implement": {"write": {"calc.py": PLANTING_BUILD}}},
        # The next attempt's code is still wrong: only the planted module would pass it.
        {"tests": {}, "implement": {"write": {"calc.py": "# mul, again\n" + WRONG_MUL}}},
    ]
    result = run(project, agent_io, sandbox, story)
    assert_caught(result)
    assert len(result.stories[0].attempts) == 2


# --- code under test that forges pytest's reports from inside the test process ----------

# Imported by the test module, it makes every report pytest builds say "passed": the plugin's
# record, the JUnit report, the summary line and the exit status then all agree. It names
# pytest only through strings built at run time, so no reading of its text finds it.
REPORT_PATCHING_MUL = (
    WRONG_MUL
    + """

import sys

_reports = sys.modules.get("_py" + "test.reports")
if _reports is not None:
    _made = _reports.TestReport.from_item_and_call.__func__

    def _passed(cls, item, call):
        report = _made(cls, item, call)
        report.outcome, report.longrepr = "passed", None
        return report

    _reports.TestReport.from_item_and_call = classmethod(_passed)
"""
)
# Imported by the test module, it makes every test function swallow its own failure: the test
# then really passes, and nothing in the process can tell. Only its text shows it.
RUNTEST_PATCH = """import sys

if "_pytest.python" in sys.modules:
    from _pytest.python import Function

    _run = Function.runtest

    def _quiet(self):
        try:
            _run(self)
        except AssertionError:
            pass

    Function.runtest = _quiet
"""
RUNTEST_PATCHING_MUL = WRONG_MUL + "\n\n" + RUNTEST_PATCH


def test_code_that_patches_pytests_reports_at_import_is_caught_by_the_raise_pytest_saw(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = calc_project(make_project, maxStoryRetries=1)
    result = run(project, agent_io, sandbox, cheat({}, {"write": {"calc.py": REPORT_PATCHING_MUL}}))
    story = result.stories[0]
    assert story.state is StoryState.NEEDS_REVIEW, [(a.outcome, a.reason) for a in story.attempts]
    assert not result.ready
    reason = story.attempts[-1].reason
    assert "reported passed, though its test function raised" in reason, reason
    assert "tests.test_calc::test_mul" in reason


def test_code_that_patches_the_test_functions_at_import_needs_review_for_naming_pytest(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = calc_project(make_project, maxStoryRetries=1)
    result = run(
        project, agent_io, sandbox, cheat({}, {"write": {"calc.py": RUNTEST_PATCHING_MUL}})
    )
    story = result.stories[0]
    assert story.state is StoryState.NEEDS_REVIEW, [(a.outcome, a.reason) for a in story.attempts]
    assert not result.ready
    reason = story.attempts[-1].reason
    assert "its code reaches into the test runner (calc.py:" in reason, reason
    assert "names pytest's machinery" in reason


# --- code under test that rewrites a frozen test while the check runs --------------------

# Imported by the first test module pytest collects, it guts the story's own test module
# before pytest reaches it; the check's clean-up would put the file back unseen.
REWRITING_MUL = (
    WRONG_MUL
    + """

import os

if os.path.exists("tests/test_mul.py"):
    with open("tests/test_mul.py", "w") as gutted:
        gutted.write("def test_mul_by_helper():\\n    pass\\n")
"""
)


@pytest.mark.parametrize("confined", [True, False], ids=["sandboxed", "sandbox-off"])
def test_code_that_rewrites_a_frozen_test_while_the_check_runs_cannot(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox, confined: bool
) -> None:
    project = calc_project(make_project, failing_test=False, maxStoryRetries=1)
    story = cheat({"write": {"tests/test_mul.py": OWN_TEST}}, {"write": {"calc.py": REWRITING_MUL}})
    if confined:  # the test side is read-only in the check: the write fails, the test runs
        result = run(project, agent_io, sandbox, story, owns_failing_test=False)
        assert_caught(result)
        return
    # Unconfined, the rewrite works and is seen after the check: never passed.
    data = {"plan": [{"prd": plan(owns_failing_test=False)}], "stories": {"US-001": story}}
    data["calls_log"] = str(agent_io / "calls.log")
    (agent_io / "scenario.json").write_text(json.dumps(data))
    result = project.run(agent_io / "scenario.json", gate_path=GATE_PATH)
    record = result.stories[0]
    assert record.state is StoryState.NEEDS_REVIEW, [a.reason for a in record.attempts]
    assert not result.ready
    assert "changed the test side while it ran: tests/test_mul.py" in record.attempts[-1].reason


# --- more cheats: each caught by the design already, kept as regressions -----------------


def test_pytest_plugins_named_in_a_code_module_load_nothing(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    # pytest honours `pytest_plugins` only in a conftest or a test module (both frozen).
    project = calc_project(make_project, maxStoryRetries=1)
    mul = "pytest_plugins = ['forging_plugin']\n\n" + WRONG_MUL
    writes = {"calc.py": mul, "forging_plugin.py": FORGING_PLUGIN}
    result = run(project, agent_io, sandbox, cheat({}, {"write": writes}))
    assert_caught(result)


# Package code whose init() ends the test binary before any test runs, with exit 0.
GO_EXIT = 'package calc\n\nimport "os"\n\nfunc init() {\n\tos.Exit(0)\n}\n'


def test_go_package_code_that_exits_0_in_init_leaves_its_frozen_test_unreported(
    make_project: MakeProject,
) -> None:
    project = go_project(make_project)
    # `TestMain` lives only in a _test.go file (on the test side): package code has init().
    result = collectors_run(
        project,
        {"US-001": [{"tests": {}, "implement": {"write": {"exit.go": GO_EXIT}}}]},
        {"mul": [GO_ID]},
    )
    [mul] = result.stories
    assert mul.state is StoryState.FAILED, [a.reason for a in mul.attempts]
    assert GO_ID in mul.attempts[-1].reason
    assert not result.ready


# jest runs setupFilesAfterEnv before each test file: this one makes every `toBe` agree.
JEST_FORGER = (
    "const real = global.expect;\n"
    "global.expect = (value) => ({ ...real(value), toBe: () => undefined });\n"
)


def test_a_jest_setup_file_added_through_package_json_is_reverted(
    make_project: MakeProject,
) -> None:
    project = jest_project(make_project, ops=("add",), files={"add.js": ADD_STUB})
    package = json.loads((project.tmp / "source" / "package.json").read_text())
    package["jest"] = {"setupFilesAfterEnv": ["./forge.js"]}
    implement = {"write": {"package.json": json.dumps(package), "forge.js": JEST_FORGER}}
    result = collectors_run(
        project, {"US-001": [{"tests": {}, "implement": implement}]}, {"add": [JS_IDS["add"]]}
    )
    [add] = result.stories
    assert add.state is StoryState.FAILED, [a.reason for a in add.attempts]
    assert add.attempts[-1].tests_reverted == ["package.json"]
    assert not result.ready


# A module named pytest at the worktree's top: `python -m pytest` runs it instead of pytest.
# It starts the real pytest (reqdrive's plugin and all) with a plugin of its own that calls
# no test function, so every test really passes; no name in it reads as pytest's machinery.
PYTEST_HIJACK = """import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_real = __import__("py" + "test")


class _Quiet:
    def pytest_pyfunc_call(self, pyfuncitem):
        return True


_Quiet.pytest_pyfunc_call = _real.hookimpl(tryfirst=True)(_Quiet.pytest_pyfunc_call)
sys.exit(_real.main(sys.argv[1:], plugins=[_Quiet()]))
"""


def test_a_module_that_shadows_the_runner_at_the_worktrees_top_needs_review(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = calc_project(make_project, maxStoryRetries=1)
    writes = {"calc.py": WRONG_MUL, "pytest.py": PYTEST_HIJACK}
    result = run(project, agent_io, sandbox, cheat({}, {"write": writes}))
    story = result.stories[0]
    assert story.state is StoryState.NEEDS_REVIEW, [(a.outcome, a.reason) for a in story.attempts]
    assert not result.ready
    assert "pytest.py shadows the module pytest" in story.attempts[-1].reason
