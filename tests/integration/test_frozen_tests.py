"""Frozen tests: a story's tests are written, proven and committed before its code, and laid
back over the worktree before every check. Each attack is the scripted agent, a real process
in the App's sandbox, cheating on a real pytest suite in a real git repository."""

from __future__ import annotations

import json
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_pipeline import GITIGNORE, MakeProject, Project, git, project_factory
from tests.integration.test_pipeline_judging import GATE_PATH
from tests.integration.test_pipeline_sandbox import run as run_sandboxed
from tests.support.pytest_command import PLAIN_PYTEST
from worker.confine.sandbox import Sandbox
from worker.model.state import AttemptOutcome, RunResult, StoryRecord, StoryState

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

CALC = "def add(a, b):\n    return a + b\n"
WRONG_MUL = CALC + "\n\ndef mul(a, b):\n    return 0\n"
RIGHT_MUL = CALC + "\n\ndef mul(a, b):\n    return a * b\n"
BASE_TESTS = "import calc\n\n\ndef test_add():\n    assert calc.add(2, 3) == 5\n"
# The maintainer's failing test, written with the requirement (test-first).
MUL_TEST = "\n\ndef test_mul():\n    assert calc.mul(2, 3) == 6\n"
MUL_ID = "tests.test_calc::test_mul"
# The story's own test, written by its tests call, using a helper of the suite.
HELPER = "def expected_product(a, b):\n    return a * b\n"
OWN_TEST = (
    "import calc\nfrom tests.helpers import expected_product\n\n\n"
    "def test_mul_by_helper():\n    assert calc.mul(4, 5) == expected_product(4, 5)\n"
)
# A plugin that turns every failing test into a pass: what a config file may load.
FORGING_PLUGIN = (
    "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    report = outcome.get_result()\n"
    "    report.outcome = 'passed'\n"
)
# A test module with no tests that rewrites the JUnit report once pytest has written it.
REPORT_FORGER = (
    "import atexit, os, re, shlex\n\n\n"
    "def _forge():\n"
    "    for word in shlex.split(os.environ.get('PYTEST_ADDOPTS', '')):\n"
    "        if word.startswith('--junitxml='):\n"
    "            path = word.split('=', 1)[1]\n"
    "            text = open(path).read()\n"
    "            text = re.sub(r'<failure[^>]*>.*?</failure>', '', text, flags=re.S)\n"
    "            text = re.sub(r'<error[^>]*>.*?</error>', '', text, flags=re.S)\n"
    "            text = re.sub(r'(failures|errors)=\"\\d+\"', r'\\1=\"0\"', text)\n"
    "            open(path, 'w').write(text)\n\n\n"
    "atexit.register(_forge)\n"
)
# Python imports sitecustomize at start-up from the checks' PYTHONPATH: it fixes mul for them.
SITECUSTOMIZE = (
    "import builtins\n\n_real = builtins.__import__\n\n\n"
    "def _patched(name, *args, **kwargs):\n"
    "    module = _real(name, *args, **kwargs)\n"
    "    if name == 'calc':\n        module.mul = lambda a, b: a * b\n"
    "    return module\n\n\nbuiltins.__import__ = _patched\n"
)


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def calc_project(
    make_project: MakeProject,
    *,
    failing_test: bool = True,
    more: dict[str, str] | None = None,
    **config: Any,
) -> Project:
    """A calculator with a passing add test and (test-first) a failing mul test (and `more`
    files)."""
    files = {
        "calc.py": CALC,
        "tests/__init__.py": "",
        "tests/helpers.py": HELPER,
        "tests/test_calc.py": BASE_TESTS + (MUL_TEST if failing_test else ""),
        "pyproject.toml": (
            '[project]\nname = "calc"\nversion = "1"\ndependencies = []\n\n'
            '[tool.pytest.ini_options]\naddopts = "-q"\n'
        ),
        **(more or {}),
    }
    settings = {"testCommand": PLAIN_PYTEST, **config}
    return make_project(settings, files)


def plan(*, owns_failing_test: bool = True) -> dict[str, Any]:
    story = {
        "id": "US-001",
        "title": "Multiply",
        "description": "As a user I want calc.mul",
        "acceptanceCriteria": ["calc.mul(a, b) returns a times b"],
        "priority": 1,
        "tests": [MUL_ID] if owns_failing_test else [],
    }
    return {"version": "1", "project": "Calc", "sourceReq": "REQ-001", "userStories": [story]}


def run(
    project: Project, agent_io: Path, sandbox: Sandbox, story: list[dict[str, Any]], **kw: Any
) -> RunResult:
    owns = kw.pop("owns_failing_test", True)
    data = {"plan": [{"prd": plan(owns_failing_test=owns)}], "stories": {"US-001": story}}
    return run_sandboxed(project, agent_io, sandbox, data, gate_path=GATE_PATH, **kw)


def cheat(tests: dict[str, Any], implement: dict[str, Any]) -> list[dict[str, Any]]:
    """One attempt, repeated: the tests call's steps, then the implement call's."""
    return [{"tests": tests, "implement": implement}]


def assert_caught(result: RunResult, *reverted: str) -> StoryRecord:
    """The cheat did not pass: the story failed, the PR is a draft, and the test-side files
    the implement call changed were reverted and named."""
    story = result.stories[0]
    assert story.state is StoryState.FAILED, [(a.outcome, a.reason) for a in story.attempts]
    assert not result.ready
    last = story.attempts[-1]
    assert last.outcome is AttemptOutcome.GATES_FAILED, last.reason
    for path in reverted:
        assert path in last.tests_reverted, last.tests_reverted
        assert f"{path}" in last.reason and "while implementing: reverted" in last.reason
    return story


def test_an_honest_story_writes_its_tests_first_then_its_code_and_is_ready(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = calc_project(make_project, failing_test=False)
    story = cheat({"write": {"tests/test_mul.py": OWN_TEST}}, {"write": {"calc.py": RIGHT_MUL}})
    result = run(project, agent_io, sandbox, story, owns_failing_test=False)

    record = result.stories[0]
    assert record.state is StoryState.PASSED and result.ready
    assert project.branch_log() == ["test: [US-001] - Multiply", "feat: [US-001] - Multiply"]
    frozen = record.frozen
    assert frozen is not None and frozen.commit is not None
    assert frozen.tests == ["tests.test_mul::test_mul_by_helper"]
    assert frozen.at_parent == {"tests.test_mul::test_mul_by_helper": "failed"}
    branch = "reqdrive/req-001-demo"
    assert git(project.remote, "rev-parse", f"{branch}~1") == frozen.commit
    assert record.attempts[0].frozen_commit == frozen.commit
    # Two calls, in order: the tests, then the code.
    assert [c for c in project_calls(agent_io) if c.startswith("US-")] == [
        "US-001 1 tests",
        "US-001 1",
    ]
    body = (project.run_dir() / "pr.md").read_text()
    assert frozen.commit[:12] in body
    run_json = json.loads((project.run_dir() / "run.json").read_text())
    assert run_json["frozen_tests"] == {"US-001": frozen.commit}


def project_calls(agent_io: Path) -> list[str]:
    log = agent_io / "calls.log"
    return [line.split(" pid=")[0] for line in log.read_text().splitlines()]


def test_a_helper_the_frozen_test_uses_changed_while_implementing_is_reverted(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = calc_project(make_project, failing_test=False)
    story = cheat(
        {"write": {"tests/test_mul.py": OWN_TEST}},
        # mul is wrong; the helper the test compares with is bent to agree with it.
        {
            "write": {
                "calc.py": WRONG_MUL,
                "tests/helpers.py": "def expected_product(a, b):\n    return 0\n",
            }
        },
    )
    result = run(project, agent_io, sandbox, story, owns_failing_test=False)
    assert_caught(result, "tests/helpers.py")


def test_a_second_definition_appended_below_the_real_test_is_reverted(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = calc_project(make_project)
    shadowed = BASE_TESTS + MUL_TEST + "\n\ndef test_mul():\n    pass\n"
    story = cheat({}, {"write": {"calc.py": WRONG_MUL, "tests/test_calc.py": shadowed}})
    result = run(project, agent_io, sandbox, story)
    assert_caught(result, "tests/test_calc.py")


def test_tests_replaced_by_a_link_to_a_gutted_copy_is_refused(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = calc_project(make_project)
    # The copy is a hidden folder, which pytest does not collect: only the link shows it.
    gut = (
        "cp -r tests .gutted && "
        "printf 'def test_add():\\n    pass\\n\\n\\ndef test_mul():\\n    pass\\n' "
        "> .gutted/test_calc.py && rm -rf tests && ln -s .gutted tests"
    )
    story = cheat({}, {"write": {"calc.py": WRONG_MUL}, "run": ["sh", "-c", gut]})
    result = run(project, agent_io, sandbox, story)
    assert_caught(result, "tests")


@pytest.mark.parametrize(
    "config", [".pytest.toml", "pytest.toml", ".pytest.ini", "tests/pytest.ini"]
)
def test_a_pytest_plugin_loaded_from_a_config_file_is_reverted(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox, config: str
) -> None:
    project = calc_project(make_project)
    if config.endswith(".toml"):
        text = '[pytest]\naddopts = ["-p", "forging_plugin"]\n'
    else:
        text = "[pytest]\naddopts = -p forging_plugin\n"
    writes = {"calc.py": WRONG_MUL, "forging_plugin.py": FORGING_PLUGIN, config: text}
    result = run(project, agent_io, sandbox, cheat({}, {"write": writes}))
    assert_caught(result, config)


def test_a_new_test_module_that_rewrites_the_junit_report_at_exit_is_reverted(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = calc_project(make_project)
    writes = {"calc.py": WRONG_MUL, "tests/test_zz_report.py": REPORT_FORGER}
    result = run(project, agent_io, sandbox, cheat({}, {"write": writes}))
    assert_caught(result, "tests/test_zz_report.py")


def test_a_skip_at_import_of_the_test_module_is_reverted(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = calc_project(make_project)
    skipped = (
        "import pytest\n\npytest.skip('later', allow_module_level=True)\n" + BASE_TESTS + MUL_TEST
    )
    writes = {"calc.py": WRONG_MUL, "tests/test_calc.py": skipped}
    result = run(project, agent_io, sandbox, cheat({}, {"write": writes}))
    assert_caught(result, "tests/test_calc.py")


def test_a_sitecustomize_in_the_worktree_is_reverted(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    # A repository whose checks put its top on PYTHONPATH (as many do for src-less layouts).
    project = calc_project(make_project, testCommand=f"PYTHONPATH=. {PLAIN_PYTEST}")
    writes = {"calc.py": WRONG_MUL, "sitecustomize.py": SITECUSTOMIZE}
    result = run(project, agent_io, sandbox, cheat({}, {"write": writes}))
    assert_caught(result, "sitecustomize.py")


def test_pytest_settings_in_pyproject_are_reverted_and_its_dependencies_kept(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = calc_project(make_project)
    pyproject = (
        '[project]\nname = "calc"\nversion = "1"\ndependencies = ["attrs"]\n\n'
        '[tool.pytest.ini_options]\naddopts = "-q -p forging_plugin"\n'
    )
    writes = {
        "calc.py": WRONG_MUL,
        "forging_plugin.py": FORGING_PLUGIN,
        "pyproject.toml": pyproject,
    }
    result = run(project, agent_io, sandbox, cheat({}, {"write": writes}))
    story = assert_caught(result, "pyproject.toml")
    # The change to the dependencies is the code's: kept in the attempt's patch.
    patch = (project.run_dir() / "iteration-1.patch").read_text()
    assert 'dependencies = ["attrs"]' in patch and 'forging_plugin"' not in patch
    assert story.attempts[-1].commit is None


def test_a_tests_call_that_writes_code_has_it_reverted_and_named(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = calc_project(make_project, failing_test=False)
    # The tests call writes the code too, so its test would pass at once: the code is
    # reverted, the test proven failing without it, and the implement call does the work.
    story = cheat(
        {"write": {"tests/test_mul.py": OWN_TEST, "calc.py": RIGHT_MUL}},
        {"write": {"calc.py": RIGHT_MUL}},
    )
    result = run(project, agent_io, sandbox, story, owns_failing_test=False)
    record = result.stories[0]
    assert record.state is StoryState.PASSED, [a.reason for a in record.attempts]
    assert record.frozen is not None and record.frozen.reverted == ["calc.py"]


def test_a_tests_call_whose_test_passes_already_freezes_nothing(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = calc_project(make_project, failing_test=False, maxStoryRetries=1)
    vacuous = "def test_mul_by_helper():\n    assert True\n"
    story = cheat({"write": {"tests/test_mul.py": vacuous}}, {"write": {"calc.py": WRONG_MUL}})
    result = run(project, agent_io, sandbox, story, owns_failing_test=False)
    record = result.stories[0]
    assert record.state is StoryState.FAILED and record.frozen is None
    attempt = record.attempts[0]
    assert attempt.outcome is AttemptOutcome.TESTS_REFUSED
    assert "passes without the story's code, so it proves nothing" in attempt.reason
    # The implement call never ran.
    assert [c for c in project_calls(agent_io) if c.startswith("US-")] == ["US-001 1 tests"]
    assert "US-001" not in git(project.remote, "log", "--all", "--format=%s")


def test_together_keeps_one_call_and_the_pr_says_the_tests_were_not_frozen(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = calc_project(make_project, failing_test=False, tests="together")
    story = [{"write": {"tests/test_mul.py": OWN_TEST, "calc.py": RIGHT_MUL}}]
    result = run(project, agent_io, sandbox, story, owns_failing_test=False)
    assert result.stories[0].state is StoryState.PASSED and result.stories[0].frozen is None
    assert project.branch_log() == ["feat: [US-001] - Multiply"]
    assert [c for c in project_calls(agent_io) if c.startswith("US-")] == ["US-001 1"]
    assert "tests were not frozen" in (project.run_dir() / "pr.md").read_text()


def test_a_retry_keeps_the_frozen_tests_and_repeats_only_the_implement_call(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = calc_project(make_project, failing_test=False)
    tests = {"write": {"tests/test_mul.py": OWN_TEST}}
    story = [
        {"tests": tests, "implement": {"write": {"calc.py": WRONG_MUL}}},
        {"tests": tests, "implement": {"write": {"calc.py": RIGHT_MUL}}},
    ]
    result = run(project, agent_io, sandbox, story, owns_failing_test=False)
    record = result.stories[0]
    assert record.state is StoryState.PASSED and result.ready
    assert [c for c in project_calls(agent_io) if c.startswith("US-")] == [
        "US-001 1 tests",
        "US-001 1",
        "US-001 2",
    ]
    assert record.frozen is not None
    assert [a.frozen_commit for a in record.attempts] == [record.frozen.commit] * 2
    assert project.branch_log() == ["test: [US-001] - Multiply", "feat: [US-001] - Multiply"]


GREET = 'def greet():\n    return "hello"\n'
GREET_TEST = 'import calc\n\n\ndef test_greet():\n    assert calc.greet() == "hello"\n'


@pytest.mark.parametrize("declared", [True, False])
def test_a_passing_test_changed_on_the_plans_word_needs_review_and_otherwise_is_refused(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox, declared: bool
) -> None:
    project = make_project(
        {"testCommand": PLAIN_PYTEST, "maxStoryRetries": 1},
        {"calc.py": GREET, "tests/__init__.py": "", "tests/test_greet.py": GREET_TEST},
    )
    story = {
        "id": "US-001",
        "title": "Greet the world",
        "acceptanceCriteria": ["greet() says Hello, world"],
        "priority": 1,
    }
    if declared:
        story["changesTests"] = [{"path": "tests/test_greet.py", "reason": "the greeting changes"}]
    changed = GREET_TEST.replace('"hello"', '"Hello, world"')
    steps = cheat(
        {"write": {"tests/test_greet.py": changed}},
        {"write": {"calc.py": GREET.replace('"hello"', '"Hello, world"')}},
    )
    data = {"plan": [{"prd": {"userStories": [story]}}], "stories": {"US-001": steps}}
    result = run_sandboxed(project, agent_io, sandbox, data, gate_path=GATE_PATH)

    record = result.stories[0]
    assert not result.ready
    if declared:
        assert record.state is StoryState.NEEDS_REVIEW, [a.reason for a in record.attempts]
        assert record.frozen is not None
        assert record.frozen.changed_passing == ["tests.test_greet::test_greet"]
        assert "the greeting changes" in record.attempts[0].reason
        body = (project.run_dir() / "pr.md").read_text()
        assert "changed a passing test: `tests.test_greet::test_greet`" in body
    else:
        assert record.state is StoryState.FAILED and record.frozen is None
        attempt = record.attempts[0]
        assert attempt.outcome is AttemptOutcome.TESTS_REFUSED
        assert "tests.test_greet::test_greet is an existing test the plan does not let" in (
            attempt.reason
        )


# The setup makes a virtualenv (ignored by git) whose site-packages also see this suite's.
VENV_SETUP = f"""set -e
python3 -m venv --without-pip .venv
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "{sysconfig.get_paths()["purelib"]}" > "$site/suite.pth"
"""


def test_a_pth_file_dropped_into_the_setups_ignored_virtualenv_is_refused(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = make_project(
        {
            "setup": "bash setup.sh",
            "testCommand": ".venv/bin/python -m pytest -q -p no:cacheprovider",
            "maxStoryRetries": 1,
        },
        {
            ".gitignore": GITIGNORE + ".venv/\n",
            "setup.sh": VENV_SETUP,
            "calc.py": CALC,
            "tests/__init__.py": "",
            "tests/test_calc.py": BASE_TESTS + MUL_TEST,
        },
    )
    site = f".venv/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    writes = {
        "calc.py": WRONG_MUL,
        # Python runs a .pth file's import lines at start-up: this one fixes mul for the checks.
        f"{site}/zz_fix.pth": "import calc_fix\n",
        f"{site}/calc_fix.py": SITECUSTOMIZE,
    }
    result = run(project, agent_io, sandbox, cheat({}, {"write": writes}))
    # The setup's folders are read-only to the agent (docs/sandbox.md): the write fails, the
    # call with it, and the checks run the code as written.
    story = assert_caught(result)
    assert story.attempts[-1].agent_exit_code not in (None, 0)
