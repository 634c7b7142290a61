"""Per-test results the worker collects itself, from real runners, and where they disagree."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.support.js_runners import install_runner
from tests.support.pytest_command import PLAIN_PYTEST
from worker.confine.redact import Redactor
from worker.confine.sandbox import Sandbox
from worker.model.gates import GateResult, GateSpec, Runner, TestStatus
from worker.verdict.gates import run_gate, run_gates
from worker.verdict.runners import PLUGIN_DIR, detect_runner

PYTHON_BIN = str(Path(sys.executable).parent)
ENV = {"PATH": f"{PYTHON_BIN}:{os.environ['PATH']}", "LANG": "C.UTF-8"}
PYTEST = PLAIN_PYTEST
SAMPLE = """
import pytest

def test_ok():
    assert True

def test_broken():
    assert 1 == 2

@pytest.mark.xfail
def test_expected_to_fail():
    assert 0

@pytest.mark.parametrize("x", [1, 2])
def test_param(x):
    assert x

class TestGroup:
    def test_member(self):
        pass
"""


def gate(command: str, name: str = "tests", **extra: object) -> GateSpec:
    return GateSpec.model_validate({"name": name, "command": command, **extra})


def run(
    repo: Path, spec: GateSpec, *, only: list[str] | None = None, env: dict[str, str] = ENV
) -> GateResult:
    home = repo.parent / "home"
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    return run_gate(
        spec,
        cwd=repo,
        env={**env, "HOME": str(home), "TMPDIR": str(home / "tmp")},
        output_dir=repo.parent / "out",
        label="iteration-1",
        redactor=Redactor(),
        only=only,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    (folder / "tests").mkdir(parents=True)
    (folder / "tests" / "test_sample.py").write_text(SAMPLE)
    return folder


@pytest.mark.parametrize(
    ("command", "runner"),
    [
        ("python -m pytest -q", Runner.PYTEST),
        (".venv/bin/pytest tests", Runner.PYTEST),
        ("go test ./...", Runner.GO),
        ("npx vitest run", Runner.VITEST),
        ("npx jest --ci", Runner.JEST),
        ("node --test test/", Runner.NODE),
        ("cargo nextest run", Runner.NEXTEST),
        ("cargo test", Runner.CARGO),
        ("npm test", None),
        ("make check", None),
        ("pip install pytest-cov && ruff check", None),
    ],
)
def test_the_runner_is_told_from_the_command(command: str, runner: Runner | None) -> None:
    assert detect_runner(command) is runner


def test_pytest_results_come_from_the_plugin_and_agree_with_its_junit(repo: Path) -> None:
    result = run(repo, gate(PYTEST))
    assert result.tests == {
        "tests.test_sample::test_ok": TestStatus.PASSED,
        "tests.test_sample::test_broken": TestStatus.FAILED,
        "tests.test_sample::test_expected_to_fail": TestStatus.SKIPPED,
        "tests.test_sample::test_param[1]": TestStatus.PASSED,
        "tests.test_sample::test_param[2]": TestStatus.PASSED,
        "tests.test_sample.TestGroup::test_member": TestStatus.PASSED,
    }
    assert result.disagreements == [] and result.no_results == ""
    assert "assert 1 == 2" in result.failures["tests.test_sample::test_broken"]


def test_ids_follow_the_repository_s_junit_prefix_as_its_report_does(repo: Path) -> None:
    (repo / "pytest.ini").write_text("[pytest]\naddopts = --junit-prefix=suite\n")
    result = run(repo, gate(PYTEST))
    assert result.disagreements == [] and result.tests is not None
    assert result.tests["suite.tests.test_sample::test_ok"] is TestStatus.PASSED
    # A file that cannot be imported stops the session before any test runs.
    (repo / "tests" / "test_broken_import.py").write_text("import no_such_module\n")
    broken = run(repo, gate(PYTEST))
    assert broken.disagreements == []
    assert broken.tests == {"suite::tests.test_broken_import": TestStatus.FAILED}


def test_only_runs_the_ids_asked_for_and_says_which(repo: Path) -> None:
    only = ["tests.test_sample::test_ok", "tests.test_sample.TestGroup::test_member", "gone"]
    result = run(repo, gate(PYTEST), only=only)
    assert result.passed and result.disagreements == []
    assert result.tests == {
        "tests.test_sample::test_ok": TestStatus.PASSED,
        "tests.test_sample.TestGroup::test_member": TestStatus.PASSED,
    }
    assert result.selected == sorted(only)


def test_only_skips_gates_that_run_no_tests(repo: Path) -> None:
    specs = [gate(PYTEST), gate("echo linted", name="lint")]
    home = repo.parent / "home"
    (home / "tmp").mkdir(parents=True)
    results = run_gates(
        specs,
        cwd=repo,
        env={**ENV, "HOME": str(home), "TMPDIR": str(home / "tmp")},
        output_dir=repo.parent / "out",
        label="rerun",
        redactor=Redactor(),
        fail_fast=False,
        only=["tests.test_sample::test_broken"],
    )
    assert [(r.name, r.tests) for r in results] == [
        ("tests", {"tests.test_sample::test_broken": TestStatus.FAILED})
    ]


def test_a_pytest_the_tests_start_themselves_is_not_the_gate_s(repo: Path) -> None:
    inner = repo.parent / "inner"
    inner.mkdir()
    (inner / "test_inner.py").write_text("def test_inner_one():\n    pass\n")
    (repo / "tests" / "test_runs_pytest.py").write_text(
        "import subprocess, sys\n\n"
        "def test_runs_pytest():\n"
        f"    done = subprocess.run([sys.executable, '-m', 'pytest', '-q', {str(inner)!r}])\n"
        "    assert done.returncode == 0\n"
    )
    result = run(repo, gate(PYTEST))
    assert result.disagreements == []
    assert result.tests is not None and "tests.test_runs_pytest::test_runs_pytest" in result.tests
    assert not any("inner" in t.removeprefix("tests.test_runs_pytest") for t in result.tests)


def test_a_green_exit_with_failed_tests_disagrees(repo: Path) -> None:
    result = run(repo, gate(f"{PYTEST} || true"))
    assert result.passed
    assert result.disagreements == [
        "the command exited 0, though pytest exited 1",
        "the command exited 0, though tests failed: tests.test_sample::test_broken",
    ]


def test_pytest_without_the_plugin_disagrees(repo: Path) -> None:
    result = run(repo, gate(f"{PYTEST} -p no:reqdrive_results"))
    assert result.disagreements == [
        "pytest ran without reqdrive's plugin (disabled, or PYTHONPATH replaced where reqdrive "
        "could not add to it: append to PYTHONPATH instead)"
    ]


def test_a_pythonpath_the_command_sets_keeps_the_plugin(repo: Path) -> None:
    # As `reqdrive init` writes for a src/ layout.
    result = run(repo, gate(f"PYTHONPATH=src {PYTEST}"))
    assert result.disagreements == [] and result.tests is not None


def test_a_script_that_replaces_pythonpath_runs_again_without_the_plugin(repo: Path) -> None:
    (repo / "run.sh").write_text(f"export PYTHONPATH=src\n{PYTEST}\n")
    result = run(repo, gate("bash run.sh", runner="pytest"))
    assert result.tests is not None and len(result.tests) == 6
    assert 'Error importing plugin "reqdrive_results"' not in result.output_tail
    assert [d.split(" (")[0] for d in result.disagreements] == [
        "pytest ran without reqdrive's plugin"
    ]
    script = run(repo, gate("bash run.sh"))  # no runner named: JUnit alone, as before
    assert script.tests is not None and script.disagreements == []


def test_a_conftest_that_unplugs_the_plugin_leaves_results_that_disagree(repo: Path) -> None:
    (repo / "conftest.py").write_text(
        "def pytest_configure(config):\n"
        "    config.pluginmanager.unregister(name='reqdrive_results')\n"
    )
    result = run(repo, gate(PYTEST))
    assert result.disagreements == [
        "1 pytest session(s) started but 0 finished (a process that exits from inside a test "
        "leaves no report to trust)",
        "pytest's JUnit report and reqdrive's plugin differ on: tests.test_sample.TestGroup::"
        "test_member, tests.test_sample::test_broken, tests.test_sample::test_expected_to_fail, "
        "tests.test_sample::test_ok, tests.test_sample::test_param[1] and 1 more",
        "pytest's summary in the log says 1 failed and 4 passed; the results say 0 failed and "
        "0 passed",
    ]


def test_a_repository_option_cannot_unplug_the_plugin(repo: Path) -> None:
    (repo / "pytest.ini").write_text("[pytest]\naddopts = -p no:reqdrive_results\n")
    result = run(repo, gate(PYTEST))
    assert result.disagreements == [] and result.tests is not None


def test_a_junit_report_rewritten_at_exit_disagrees_with_the_plugin(repo: Path) -> None:
    # A test module with no tests that rewrites the JUnit report when the process exits:
    # every test passed, by the report's word.
    (repo / "tests" / "test_zz_forge.py").write_text(
        "import atexit, os, re\n"
        "def _forge():\n"
        "    for word in os.environ.get('PYTEST_ADDOPTS', '').split():\n"
        "        if word.startswith('--junitxml='):\n"
        "            path = word.split('=', 1)[1]\n"
        "            text = open(path).read()\n"
        "            text = re.sub(r'<failure.*?</failure>', '', text, flags=re.S)\n"
        "            open(path, 'w').write(text)\n"
        "            os._exit(0)\n"
        "atexit.register(_forge)\n"
    )
    result = run(repo, gate(PYTEST))
    assert result.exit_code == 0
    assert "pytest's JUnit report and reqdrive's plugin differ on: tests.test_sample::" in (
        " ".join(result.disagreements)
    )
    assert "the command exited 0, though pytest exited 1" in result.disagreements


def test_a_test_that_ends_the_process_leaves_a_session_that_never_finished(repo: Path) -> None:
    (repo / "tests" / "test_sample.py").write_text(
        "import os\n\ndef test_a():\n    pass\n\ndef test_b():\n    os._exit(0)\n"
    )
    result = run(repo, gate(PYTEST))
    assert result.exit_code == 0
    assert any("started but 0 finished" in d for d in result.disagreements)
    assert "collected but never reported: tests.test_sample::test_b" in result.disagreements


def test_a_test_gate_without_results_names_the_config_line(repo: Path) -> None:
    (repo / "package.json").write_text(json.dumps({"scripts": {"test": "jest --ci"}}))
    result = run(repo, gate("echo all good"))
    assert result.tests is None
    assert "gives no per-test results" in result.no_results
    assert "runner: pytest|go|vitest|jest|node" in result.no_results
    npm = run(repo, gate("npm test --silent || true"))
    assert npm.tests is None
    assert "for jest, set `testCommand: npx jest --ci` in .github/reqdrive.yml" in npm.no_results
    lint = run(repo, gate("echo linted", name="lint"))
    assert lint.no_results == ""


JEST_TEST = """
const sum = (a, b) => a + b;
describe('sum', () => {
  test('adds', () => { expect(sum(1, 2)).toBe(3); });
  test('breaks', () => { expect(sum(1, 2)).toBe(4); });
  test.skip('later', () => {});
});
"""


@pytest.mark.parametrize("runner", ["jest", "vitest"])
def test_jest_and_vitest_report_per_test_through_the_worker_s_json(
    tmp_path: Path, runner: str
) -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    binary = install_runner(runner) / "node_modules" / ".bin" / runner
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "sum.test.js").write_text(JEST_TEST)
    (repo / "package.json").write_text('{"name": "sum", "private": true}\n')
    command = f"{binary} --ci" if runner == "jest" else f"{binary} run --globals"
    result = run(repo, gate(command))
    assert result.tests == {
        "sum.test.js::sum > adds": TestStatus.PASSED,
        "sum.test.js::sum > breaks": TestStatus.FAILED,
        "sum.test.js::sum > later": TestStatus.SKIPPED,
    }
    assert result.disagreements == []
    # Only the ids asked for run: their files, their names.
    only = run(repo, gate(command), only=["sum.test.js::sum > adds"])
    assert only.passed and only.tests == {"sum.test.js::sum > adds": TestStatus.PASSED}
    assert only.selected == ["sum.test.js::sum > adds"]
    forged = run(repo, gate(f"{command}; exit 0"))
    assert forged.disagreements == [
        "the command exited 0, though tests failed: sum.test.js::sum > breaks"
    ]


def test_node_test_runner_reports_through_junit(tmp_path: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.test.js").write_text(
        "const test = require('node:test');\nconst assert = require('assert');\n"
        "test('adds', () => assert.strictEqual(1 + 1, 2));\n"
        "test('breaks', () => assert.strictEqual(1 + 1, 3));\n"
        "test.skip('later', () => {});\n"
    )
    result = run(repo, gate("node --test"))
    assert result.tests == {
        "test::adds": TestStatus.PASSED,
        "test::breaks": TestStatus.FAILED,
        "test::later": TestStatus.SKIPPED,
    }


GO_TEST = """package calc

import "testing"

func TestAdds(t *testing.T) {
	if 1+1 != 2 {
		t.Fatal("no")
	}
}

func TestBreaks(t *testing.T) {
	t.Fatal("broken on purpose")
}

func TestLater(t *testing.T) {
	t.Skip("later")
}
"""


def test_go_test_reports_per_test_through_json_and_only_runs_what_is_asked(
    tmp_path: Path,
) -> None:
    go = shutil.which("go")
    if go is None:
        pytest.skip("go is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "go.mod").write_text("module example.com/calc\n\ngo 1.19\n")
    (repo / "calc_test.go").write_text(GO_TEST)
    env = {**ENV, "PATH": f"{Path(go).parent}:{ENV['PATH']}", "GOFLAGS": "-count=1"}
    env["GOCACHE"] = str(tmp_path / "gocache")
    result = run(repo, gate("go test ./..."), env=env)
    assert result.tests == {
        "example.com/calc::TestAdds": TestStatus.PASSED,
        "example.com/calc::TestBreaks": TestStatus.FAILED,
        "example.com/calc::TestLater": TestStatus.SKIPPED,
    }
    assert "broken on purpose" in result.failures["example.com/calc::TestBreaks"]
    assert result.disagreements == []
    only = run(repo, gate("go test ./..."), env=env, only=["example.com/calc::TestAdds"])
    assert only.tests == {"example.com/calc::TestAdds": TestStatus.PASSED}
    assert only.passed and only.selected == ["example.com/calc::TestAdds"]
    (repo / "broken").mkdir()
    (repo / "broken" / "broken_test.go").write_text(
        'package broken\n\nimport "testing"\n\nfunc TestX(t *testing.T) { nothing() }\n'
    )
    built = run(repo, gate("go test ./..."), env=env)
    assert built.tests is not None
    assert built.tests["example.com/calc/broken"] is TestStatus.FAILED
    (repo / "broken" / "broken_test.go").unlink()
    green = run(repo, gate("go test ./... || true"), env=env)
    assert green.disagreements == [
        "the command exited 0, though tests failed: example.com/calc::TestBreaks"
    ]


RAISED_BROKEN = (
    "reported passed, though its test function raised: tests.test_sample::test_broken "
    "(AssertionError)"
)

FORGE_EVERYTHING = """
import atexit, json, os, re

def _forge():
    # Every report the worker reads, made green, and a green exit.
    results = os.environ["REQDRIVE_RESULTS"]
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


def test_a_process_that_forges_every_report_is_caught_by_the_summary_it_printed(
    repo: Path,
) -> None:
    (repo / "tests" / "test_zz_forge.py").write_text(FORGE_EVERYTHING)
    result = run(repo, gate(PYTEST))
    assert result.passed and TestStatus.FAILED not in (result.tests or {}).values()
    # The forged record of the raising test is caught twice: by what its function raised, and
    # by the summary pytest printed before the forgery.
    assert result.disagreements == [
        RAISED_BROKEN,
        "pytest's summary in the log says 1 failed and 4 passed; the results say 0 failed and "
        "5 passed",
    ]


def test_a_forged_summary_line_is_one_line_too_many(repo: Path) -> None:
    (repo / "tests" / "test_zz_forge.py").write_text(
        FORGE_EVERYTHING.replace(
            "    os._exit(0)", "    print('5 passed in 0.01s', flush=True); os._exit(0)"
        )
    )
    result = run(repo, gate(PYTEST))
    assert result.disagreements == [
        RAISED_BROKEN,
        "the log holds 2 summary lines of pytest for 1 run(s)",
    ]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
def test_in_the_sandbox_the_plugin_is_read_only_and_its_results_come_back(
    repo: Path, sandbox: Sandbox
) -> None:
    home = repo.parent / "home"
    (home / "tmp").mkdir(parents=True)
    plugin = PLUGIN_DIR / "reqdrive_results.py"
    result = run_gate(
        gate(f"{PYTEST}; rc=$?; echo '# planted' >> {plugin}; echo wrote=$?; exit $rc"),
        cwd=repo,
        env={**ENV, "HOME": str(home), "TMPDIR": str(home / "tmp")},
        output_dir=repo.parent / "out",
        label="iteration-1",
        redactor=Redactor(),
        sandbox=sandbox.bind(writable=[repo, home]),
    )
    assert result.tests is not None and len(result.tests) == 6
    assert result.disagreements == []
    assert "wrote=1" in result.output_tail and "# planted" not in plugin.read_text()
