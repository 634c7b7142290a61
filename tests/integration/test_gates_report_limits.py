"""A gate whose code writes a huge JUnit report: the worker reads it in bounded memory, or not
at all, and the story gets no per-test results from it ("report too large")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from worker.confine.limits import ResourceLimits
from worker.confine.redact import Redactor
from worker.model.gates import GateSpec
from worker.verdict.gates import run_gate
from worker.verdict.junit_report import read_junit

CASE = '<testcase classname="t.m" name="test_{0:07d}" time="0"/>\n'
# Reads a report in a fresh interpreter and prints how much its peak memory grew.
MEASURE = """
import json, resource, sys
from pathlib import Path
from worker.confine.limits import ResourceLimits
from worker.verdict.junit_report import read_junit
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
report = read_junit(Path(sys.argv[1]), limits=ResourceLimits(report_mib=int(sys.argv[2])))
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"grown_kib": grown, "problem": report.problem}))
"""
# What the gate's command runs: the agent's code writing `count` passing cases.
WRITER = (
    "import sys\n"
    "with open(sys.argv[1], 'w') as out:\n"
    "    out.write('<testsuite name=\"pytest\">\\n')\n"
    "    for i in range(int(sys.argv[2])):\n"
    f"        out.write({CASE!r}.format(i))\n"
    "    out.write('</testsuite>\\n')\n"
)


def write_report(path: Path, cases: int) -> Path:
    subprocess.run([sys.executable, "-c", WRITER, str(path), str(cases)], check=True)
    return path


def test_a_million_case_report_is_read_in_bounded_memory_and_refused(tmp_path: Path) -> None:
    report = write_report(tmp_path / "junit.xml", 1_000_000)
    assert report.stat().st_size > 50 * 1024 * 1024
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(report), "128"],  # under the size limit: parsed
        capture_output=True,
        text=True,
        check=True,
    )
    measured = json.loads(done.stdout)
    # The whole tree of a million cases takes about a gigabyte; the stream keeps the ids of
    # the first 100,000 (the case limit) and one case at a time.
    assert measured["grown_kib"] < 96 * 1024, measured
    assert "report too large" in measured["problem"]
    assert "REQDRIVE_REPORT_MAX_CASES" in measured["problem"]


def test_a_report_over_the_size_limit_is_not_read(tmp_path: Path) -> None:
    report = write_report(tmp_path / "junit.xml", 30_000)
    limited = read_junit(report, limits=ResourceLimits(report_mib=1))
    assert limited.tests is None
    assert limited.problem is not None and "REQDRIVE_REPORT_MAX_MIB" in limited.problem
    within = read_junit(report, limits=ResourceLimits(report_mib=8))
    assert within.tests is not None and len(within.tests) == 30_000


def test_the_gate_says_its_report_was_too_large(tmp_path: Path) -> None:
    worktree, runs, home = tmp_path / "worktree", tmp_path / "runs", tmp_path / "home"
    for folder in (worktree, runs, home / "tmp"):
        folder.mkdir(parents=True)
    writer = tmp_path / "writer.py"
    writer.write_text(WRITER)
    spec = GateSpec(
        name="tests", command=f'{sys.executable} {writer} "$REQDRIVE_JUNIT_XML" 5000', junit=True
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(home / "tmp")}

    def gate(limits: ResourceLimits) -> tuple[dict[str, str] | None, str]:
        result = run_gate(
            spec,
            cwd=worktree,
            env=env,
            output_dir=runs,
            label="iteration-1",
            redactor=Redactor(),
            limits=limits,
        )
        return (None if result.tests is None else dict(result.tests)), result.output_tail

    tests, output = gate(ResourceLimits(report_cases=1000))
    assert tests is None
    assert "report too large" in output and "more than 1000 test cases" in output
    tests, _ = gate(ResourceLimits())
    assert tests is not None and tests["t.m::test_0004999"] == "passed"
