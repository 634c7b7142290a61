"""Gates are real bash commands the worker runs and judges itself."""

from __future__ import annotations

import json
import os
import shlex
import sys
import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.support.processes import running
from worker.confine.gate_homes import gate_environment
from worker.confine.redact import REDACTED, Redactor
from worker.model.gates import GateResult, GateSpec, TestStatus
from worker.verdict.gates import gate_specs, run_gates

ENV = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
TOKEN = "ghp_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa9"
SAMPLE_TESTS = """
def test_ok():
    assert 1 + 1 == 2

def test_broken():
    assert 1 + 1 == 3
"""


def gate(name: str, command: str, **extra: object) -> GateSpec:
    return GateSpec.model_validate({"name": name, "command": command, **extra})


def run(
    tmp_path: Path, specs: list[GateSpec], *, parallel: bool = False, fail_fast: bool = True
) -> list[GateResult]:
    return run_gates(
        specs,
        cwd=tmp_path,
        env=ENV,
        output_dir=tmp_path / "out",
        label="iteration-1",
        redactor=Redactor(),
        parallel=parallel,
        fail_fast=fail_fast,
    )


def test_gate_specs_are_tests_then_lint_then_custom() -> None:
    custom = gate("types", "mypy .", timeout=60)
    specs = gate_specs("pytest", "ruff check .", [custom])
    assert [(s.name, s.command) for s in specs] == [
        ("tests", "pytest"),
        ("lint", "ruff check ."),
        ("types", "mypy ."),
    ]
    assert specs[2].timeout_s == 60
    assert gate_specs(None, "", []) == []


def test_gate_spec_rejects_unknown_keys() -> None:
    with pytest.raises(ValidationError, match="comand"):
        GateSpec.model_validate({"name": "x", "command": "true", "comand": "typo"})


def test_sequential_gates_stop_at_the_first_failure(tmp_path: Path) -> None:
    specs = [
        gate("first", "echo fine"),
        gate("second", "echo broken; exit 4"),
        gate("third", "touch third-ran"),
    ]
    results = run(tmp_path, specs)
    assert [(r.name, r.passed, r.exit_code) for r in results] == [
        ("first", True, 0),
        ("second", False, 4),
    ]
    assert not (tmp_path / "third-ran").exists()
    saved = json.loads((tmp_path / "out" / "iteration-1.gates.json").read_text())
    assert [g["name"] for g in saved] == ["first", "second"]
    assert saved[1]["exitCode"] == 4
    assert (tmp_path / "out" / "iteration-1.second.log").read_text() == "broken\n"


def test_without_fail_fast_every_gate_runs(tmp_path: Path) -> None:
    specs = [gate("a", "exit 1"), gate("b", "touch b-ran")]
    results = run(tmp_path, specs, fail_fast=False)
    assert [r.passed for r in results] == [False, True]
    assert (tmp_path / "b-ran").exists()


def test_parallel_gates_run_at_the_same_time(tmp_path: Path) -> None:
    # Each gate waits for the other to have started: run one after the other, the first
    # would wait for the second until its timeout and fail.
    specs = [
        gate("a", "touch a.started; until [ -e b.started ]; do sleep 0.05; done", timeout=30),
        gate("b", "touch b.started; until [ -e a.started ]; do sleep 0.05; done", timeout=30),
    ]
    results = run(tmp_path, specs, parallel=True)
    assert [(r.name, r.passed) for r in results] == [("a", True), ("b", True)]


def test_a_gate_that_hangs_fails_at_its_timeout(tmp_path: Path) -> None:
    results = run(tmp_path, [gate("hang", "echo $$ > gate.pid; sleep 300", timeout=2)])
    [result] = results
    assert result.timed_out
    assert not result.passed
    assert result.exit_code is None
    assert not running(int((tmp_path / "gate.pid").read_text()))


def test_junit_results_name_the_failed_tests(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(SAMPLE_TESTS)
    python = shlex.quote(sys.executable)
    command = (
        f'{python} -m pytest -q -p no:cacheprovider --junitxml="$REQDRIVE_JUNIT_XML" test_sample.py'
    )
    [result] = run(tmp_path, [gate("tests", command, junit=True)])
    assert not result.passed
    assert result.exit_code == 1
    assert result.failed_tests == ["test_sample::test_broken"]
    saved = json.loads((tmp_path / "out" / "iteration-1.gates.json").read_text())
    assert saved[0]["failedTests"] == ["test_sample::test_broken"]
    assert (tmp_path / "out" / "iteration-1.tests.junit.xml").is_file()


SKIPPING_TESTS = (
    SAMPLE_TESTS
    + """
import pytest

@pytest.mark.skip(reason="later")
def test_later():
    pass
"""
)


def test_pytest_reports_per_test_results_without_being_asked(tmp_path: Path) -> None:
    # A plain `pytest` command, no junit option and no config change: the worker asks pytest
    # for the report itself, so every test id is known, with its status and failure output.
    (tmp_path / "test_sample.py").write_text(SKIPPING_TESTS)
    command = f"{shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider test_sample.py"
    [result] = run(tmp_path, [gate("tests", command)])
    assert result.tests == {
        "test_sample::test_ok": TestStatus.PASSED,
        "test_sample::test_broken": TestStatus.FAILED,
        "test_sample::test_later": TestStatus.SKIPPED,
    }
    assert "assert (1 + 1) == 3" in result.failures["test_sample::test_broken"]
    assert "no per-test results" not in result.output_tail  # not asked for: nothing to say


def test_a_gate_that_runs_no_pytest_has_no_per_test_results(tmp_path: Path) -> None:
    [result] = run(tmp_path, [gate("lint", "echo clean")])
    assert result.passed and result.tests is None
    assert result.output_tail == "clean\n"


def test_a_runner_that_names_its_report_path_is_read_from_there(tmp_path: Path) -> None:
    # As `gotestsum --junitfile reports/junit.xml` or cargo nextest's junit.path would.
    xml = (
        '<testsuites><testsuite><testcase classname="pkg" name="TestAdd"/>'
        '<testcase classname="pkg" name="TestSub"><failure message="got 3">want 2</failure>'
        "</testcase></testsuite></testsuites>"
    )
    (tmp_path / "reports").mkdir()
    # A report left in the worktree (by the agent, or an earlier run) never stands in.
    (tmp_path / "reports" / "junit.xml").write_text(xml.replace("<failure", "<skipped"))
    write = f"printf '%s' {shlex.quote(xml)} > reports/junit.xml; exit 1"
    stale = gate("stale", "exit 1", junit="reports/junit.xml")
    [result] = run(tmp_path, [gate("go", write, junit="reports/junit.xml")])
    assert result.tests == {"pkg::TestAdd": TestStatus.PASSED, "pkg::TestSub": TestStatus.FAILED}
    assert result.failures["pkg::TestSub"] == "got 3\nwant 2"
    assert (tmp_path / "out" / "iteration-1.go.junit.xml").read_text() == xml
    # Where no report was left before, the path is read all the same.
    (tmp_path / "reports" / "junit.xml").unlink()
    [fresh] = run(tmp_path, [gate("go", write, junit="reports/junit.xml")])
    assert fresh.tests == result.tests
    [missing] = run(tmp_path, [stale])
    assert missing.tests is None
    assert "no per-test results: iteration-1.stale.junit.xml was not written" in missing.output_tail


@pytest.mark.parametrize("path", ["/tmp/junit.xml", "../junit.xml", "a/../../junit.xml", " "])
def test_a_report_path_must_stay_inside_the_repository(path: str) -> None:
    with pytest.raises(ValidationError, match="inside the repository"):
        gate("tests", "true", junit=path)


def test_gates_run_without_credentials_and_with_the_operators_path(tmp_path: Path) -> None:
    worker_env = {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "ANTHROPIC_API_KEY": "sk-ant-not-for-gates",
        "GITHUB_TOKEN": TOKEN,
        "REDIS_URL": "redis://:pw@127.0.0.1/0",
    }
    tools = tmp_path / "tools"
    tools.mkdir()
    python = tools / "python"
    python.write_text("#!/bin/sh\necho chosen interpreter\n")
    python.chmod(0o755)
    env = gate_environment(tmp_path / "home", worker_env, path=f"{tools}:/usr/bin:/bin")
    assert sorted(env) == ["HOME", "LANG", "PATH", "TMPDIR"]
    [result] = run_gates(
        [gate("tests", "python; env")],
        cwd=tmp_path,
        env=env,
        output_dir=tmp_path / "out",
        label="baseline",
        redactor=Redactor(),
    )
    assert result.output_tail.startswith("chosen interpreter\n")
    for value in ("sk-ant-not-for-gates", TOKEN, "redis://"):
        assert value not in result.output_tail
    assert gate_environment(tmp_path / "h2", worker_env)["PATH"] == "/usr/bin:/bin"


def test_gates_trust_the_certificates_the_worker_was_told_to(tmp_path: Path) -> None:
    # Behind a TLS-inspecting proxy the host's pip is given the proxy's CA (PIP_CERT, or
    # SSL_CERT_FILE): without it the setup's `pip install` in the sandbox fails on the
    # registry's certificate.
    bundle = "/etc/ssl/certs/ca-certificates.crt"
    worker_env = {"PATH": "/usr/bin:/bin", "PIP_CERT": bundle, "SSL_CERT_FILE": bundle}
    env = gate_environment(tmp_path / "home", {**worker_env, "GITHUB_TOKEN": TOKEN})
    assert env["PIP_CERT"] == env["SSL_CERT_FILE"] == bundle
    assert "GITHUB_TOKEN" not in env


def test_missing_or_broken_junit_means_no_per_test_results(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    # A stale report from an earlier run must not be read as this run's.
    (out / "iteration-1.silent.junit.xml").write_text(
        '<testsuite><testcase classname="old" name="t"><failure/></testcase></testsuite>'
    )
    specs = [
        gate("silent", "true", junit=True),
        gate("garbled", 'echo "<testsuite><testcase" > "$REQDRIVE_JUNIT_XML"', junit=True),
    ]
    silent, garbled = run(tmp_path, specs)
    assert silent.passed
    assert silent.failed_tests is None
    assert "no per-test results" in silent.output_tail
    assert garbled.passed
    assert garbled.failed_tests is None
    assert "cannot be parsed" in garbled.output_tail


def test_junit_variable_only_for_junit_gates(tmp_path: Path) -> None:
    specs = [
        gate("plain", 'echo "junit=${REQDRIVE_JUNIT_XML:-unset}"'),
        gate("xml", 'echo "junit=$REQDRIVE_JUNIT_XML"', junit=True),
    ]
    plain, xml = run(tmp_path, specs)
    assert plain.output_tail == "junit=unset\n"
    # The report goes to a folder of the worker's, outside the worktree, new for this run.
    written = Path(xml.output_tail.splitlines()[0].removeprefix("junit="))
    assert written.name == "report.junit.xml"
    assert not written.is_relative_to(tmp_path) and not written.parent.exists()


def test_gate_output_is_redacted_everywhere_it_is_kept(tmp_path: Path) -> None:
    specs = [gate("type check/mypy", f"echo 'Authorization: token {TOKEN}'; exit 1")]
    [result] = run(tmp_path, specs)
    out = tmp_path / "out"
    log = (out / "iteration-1.type_check_mypy.log").read_text()
    assert log == f"Authorization: token {REDACTED}\n"
    assert TOKEN not in result.output_tail
    assert TOKEN not in (out / "iteration-1.gates.json").read_text()


def test_junit_results_are_redacted_in_the_report_and_on_disk(tmp_path: Path) -> None:
    # A test id or a failure message can hold a secret (a parametrized token, an assertion
    # that prints a header): the per-test results and the XML left in the run folder hide it.
    xml = (
        f'<testsuite><testcase classname="test_api" name="test_call[{TOKEN}]">'
        f'<failure message="sent {TOKEN}">Authorization: token {TOKEN}</failure>'
        "</testcase></testsuite>"
    )
    command = f"printf '%s' {shlex.quote(xml)} > \"$REQDRIVE_JUNIT_XML\"; exit 1"
    [result] = run(tmp_path, [gate("tests", command, junit=True)])
    assert result.failed_tests == [f"test_api::test_call[{REDACTED}]"]
    for path in (tmp_path / "out").iterdir():
        assert TOKEN not in path.read_text(), path.name


def test_a_cancelled_run_starts_no_further_gate(tmp_path: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    results = run_gates(
        [gate("tests", "touch ran")],
        cwd=tmp_path,
        env=ENV,
        output_dir=tmp_path / "out",
        label="final",
        redactor=Redactor(),
        cancel=cancel,
    )
    assert results == []
    assert not (tmp_path / "ran").exists()
    assert json.loads((tmp_path / "out" / "final.gates.json").read_text()) == []
