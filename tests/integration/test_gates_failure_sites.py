"""Where failed tests failed: read from a real pytest run, and safe from a hostile report."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.support.pytest_command import QUIET_PLUGINS
from worker.confine.redact import REDACTED, Redactor
from worker.model.gates import FailureSite, GateResult, GateSpec, TestStatus
from worker.verdict.gates import run_gates

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
PYTEST = f"{shlex.quote(sys.executable)} -m pytest -q {QUIET_PLUGINS}"
TOKEN = "ghp_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa9"
TESTS = """import helper


def test_ok():
    assert helper.value() == 2


def test_broken():
    assert helper.value() == 3


class TestDeep:
    def test_raises(self):
        helper.boom()
"""
HELPER = """def value():
    return 2


def boom():
    raise ValueError("no")
"""


def run(tmp_path: Path, spec: GateSpec, redactor: Redactor | None = None) -> GateResult:
    [result] = run_gates(
        [spec],
        cwd=tmp_path,
        env=ENV,
        output_dir=tmp_path / "out",
        label="iteration-1",
        redactor=redactor or Redactor(),
    )
    return result


def test_a_plain_pytest_gate_says_on_which_line_each_test_failed(tmp_path: Path) -> None:
    # `pytest`, no option and no configuration: the worker asks for xunit1 reports, whose
    # testcases name their file; the line is where the test itself failed, even when the
    # exception came from deeper in the code.
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_sample.py").write_text(TESTS)
    (tmp_path / "helper.py").write_text(HELPER)
    spec = GateSpec(name="tests", command=f"{PYTEST} tests")

    result = run(tmp_path, spec)

    assert result.failed_tests == ["tests.test_sample.TestDeep::test_raises",
                                   "tests.test_sample::test_broken"]  # fmt: skip
    assert result.failure_sites == {
        "tests.test_sample::test_broken": FailureSite(
            path="tests/test_sample.py",
            line=9,
            message=result.failure_sites["tests.test_sample::test_broken"].message,
        ),
        "tests.test_sample.TestDeep::test_raises": FailureSite(
            path="tests/test_sample.py", line=14, message="ValueError: no"
        ),
    }
    assert result.failure_sites["tests.test_sample::test_broken"].message.startswith(
        "assert 2 == 3"
    )
    saved = json.loads((tmp_path / "out" / "iteration-1.gates.json").read_text())
    assert saved[0]["failureSites"]["tests.test_sample.TestDeep::test_raises"] == {
        "path": "tests/test_sample.py",
        "line": 14,
        "message": "ValueError: no",
    }


def test_without_a_place_in_the_output_the_tests_own_line_counts_from_one(
    tmp_path: Path,
) -> None:
    # `--tb=no` prints no traceback: pytest's `line` attribute (counted from 0) is all there is.
    (tmp_path / "test_quiet.py").write_text("\n\ndef test_quiet():\n    assert False\n")
    spec = GateSpec(name="tests", command=f"{PYTEST} --tb=no test_quiet.py")

    result = run(tmp_path, spec)

    assert result.tests == {"test_quiet::test_quiet": TestStatus.FAILED}
    assert result.failure_sites["test_quiet::test_quiet"].path == "test_quiet.py"
    assert result.failure_sites["test_quiet::test_quiet"].line == 3


def test_other_runners_places_are_found_in_their_failure_output(tmp_path: Path) -> None:
    # go test prints `file_test.go:12:`, jest a stack frame with an absolute path and a column.
    (tmp_path / "sum_test.go").write_text("package sum\n")
    (tmp_path / "sum.test.js").write_text("test('sum')\n")
    xml = (
        '<testsuites><testsuite name="go">'
        '<testcase classname="sum" name="TestSum"><failure message="Failed">'
        "    sum_test.go:12: got 3, want 4</failure></testcase>"
        '<testcase classname="sum" name="adds"><failure>Error: expect(received)\n'
        f"    at Object.&lt;anonymous&gt; ({tmp_path}/sum.test.js:5:17)</failure></testcase>"
        '<testcase classname="sum" name="TestNowhere"><failure message="Failed">'
        "    other_test.go:3: not a file here</failure></testcase>"
        "</testsuite></testsuites>"
    )
    write = f"printf '%s' {shlex.quote(xml)} > report.xml; exit 1"
    result = run(tmp_path, GateSpec(name="go", command=write, junit="report.xml"))

    sites = {t: (s.path, s.line, s.message) for t, s in result.failure_sites.items()}
    assert sites == {
        "sum::TestSum": ("sum_test.go", 12, "Failed"),
        "sum::adds": ("sum.test.js", 5, f"Error: expect(received)\nat Object.<anonymous> "
                                        f"({tmp_path}/sum.test.js:5:17)"),
    }  # fmt: skip
    assert result.failed_tests is not None and "sum::TestNowhere" in result.failed_tests


def test_a_hostile_report_names_no_place_outside_the_repository_and_no_secret(
    tmp_path: Path,
) -> None:
    # The agent's code writes the report: paths out of the repository, into .git, through a
    # symlink, huge and secret-bearing messages (one hidden from the on-disk redaction by an
    # XML character reference) must give safe sites or none.
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / ".git").mkdir()
    (repo / ".git" / "config").write_text("[core]\n")
    (repo / "tests" / "test_x.py").write_text("def test_x():\n    pass\n")
    (tmp_path / "outside.py").write_text("SECRET = 1\n")
    (repo / "link.py").symlink_to(tmp_path / "outside.py")
    hidden = "&#x67;" + TOKEN[1:]  # "g" written as a reference: the file's text has no token
    cases = {
        "absolute_outside": 'file="/etc/passwd" line="3"',
        "dotdot": 'file="../outside.py" line="1"',
        "git": 'file=".git/config" line="1"',
        "symlink": 'file="link.py" line="1"',
        "absolute_inside": f'file="{repo}/tests/test_x.py" line="0"',
        "folder": 'file="tests" line="1"',
        "control": 'file="tests/test_x.py&#10;evil" line="1"',
    }
    body = "".join(
        f'<testcase classname="hostile" name="{name}" {attrs}>'
        f'<failure message="boom">../outside.py:1: /etc/passwd:2:</failure></testcase>'
        for name, attrs in cases.items()
    )
    huge = "x" * 100_000
    body += (
        '<testcase classname="hostile" name="secret" file="tests/test_x.py" line="1">'
        f'<failure message="sent {TOKEN} and {hidden} {huge}">tests/test_x.py:2: @octocat'
        "</failure></testcase>"
    )
    xml = f'<testsuites><testsuite name="pytest">{body}</testsuite></testsuites>'
    (tmp_path / "report.xml").write_text(xml)
    command = f"cp {shlex.quote(str(tmp_path / 'report.xml'))} report.xml; exit 1"
    redactor = Redactor([TOKEN])

    [result] = run_gates(
        [GateSpec(name="tests", command=command, junit="report.xml")],
        cwd=repo,
        env=ENV,
        output_dir=tmp_path / "out",
        label="iteration-1",
        redactor=redactor,
    )

    assert result.failed_tests is not None and len(result.failed_tests) == 8
    assert set(result.failure_sites) == {"hostile::absolute_inside", "hostile::secret"}
    # An absolute path inside the worktree is made relative; pytest's line 0 is line 1.
    assert result.failure_sites["hostile::absolute_inside"].path == "tests/test_x.py"
    assert result.failure_sites["hostile::absolute_inside"].line == 1
    secret = result.failure_sites["hostile::secret"]
    assert (secret.path, secret.line) == ("tests/test_x.py", 2)
    assert TOKEN not in secret.message and secret.message.startswith(
        f"sent {REDACTED} and {REDACTED} xxx"
    )
    assert len(secret.message) == 500 and secret.message.endswith("…")
    assert TOKEN not in result.failures["hostile::secret"]
    assert TOKEN not in (tmp_path / "out" / "iteration-1.gates.json").read_text()


def test_a_checkpoint_from_before_failure_sites_still_loads() -> None:
    old = {
        "name": "tests",
        "command": "pytest",
        "passed": False,
        "exit_code": 1,
        "timed_out": False,
        "duration_s": 1.5,
        "tests": {"t::a": "failed"},
        "failures": {"t::a": "boom"},
    }
    gate = GateResult.model_validate(old)
    assert gate.failed_tests == ["t::a"] and gate.failure_sites == {}
    again = GateResult.model_validate_json(gate.model_dump_json())
    assert again == gate


@pytest.mark.parametrize("path", ["/etc/passwd", "../x.py", "a/../../x.py", ".git/config",
                                  "a\nb.py", "x" * 501])  # fmt: skip
def test_a_site_loaded_from_a_checkpoint_stays_inside_the_repository(path: str) -> None:
    with pytest.raises(ValidationError):
        FailureSite(path=path, line=1)
    assert FailureSite(path="src/a.py", line=3).path == "src/a.py"
