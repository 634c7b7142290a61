"""Test, lint and custom gates, run by the worker, never trusted to the agent."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from worker.processes import run_process
from worker.redact import Redactor, redact_file
from worker.sandbox import Sandbox

JUNIT_VAR = "REQDRIVE_JUNIT_XML"
# pytest reads extra options from here: the worker gets JUnit XML from any pytest a gate
# runs without the repository changing its configuration.
PYTEST_ADDOPTS = "PYTEST_ADDOPTS"
UNSAFE_NAME_RE = re.compile(r"[^A-Za-z0-9._-]+")
FAILURE_CHARS = 4_000  # of one failed test's output, kept for the next attempt's prompt
FAILURES_KEPT = 50  # failed tests whose output is kept per gate
# What a gate sees of the worker's environment: enough to find its tools, never a
# credential (the agent's API key included: the checks do not need it).
GATE_VARIABLES = frozenset({"PATH", "LANG", "TZ", "TERM"})
GATE_PREFIXES = ("LC_",)


class TestStatus(StrEnum):
    """What one test id did in one gate run, from its JUnit report."""

    __test__ = False  # a domain name, not a test class for pytest to collect

    PASSED = "passed"
    FAILED = "failed"  # a failure or an error (a collection error included)
    SKIPPED = "skipped"


# When a runner reports one id twice (parametrized names, retries), the worst result counts.
_WORST_FIRST = (TestStatus.FAILED, TestStatus.SKIPPED, TestStatus.PASSED)


class GateSpec(BaseModel):
    """One check the worker runs in the worktree: a bash command with a timeout."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    name: str = Field(min_length=1)
    command: str = Field(min_length=1)  # run with bash -c, in the worktree
    timeout_s: float = Field(
        default=900, gt=0, validation_alias=AliasChoices("timeout", "timeoutS", "timeout_s")
    )
    # Where per-test results come from: False (default) lets the worker ask pytest for them
    # itself; True means the command writes JUnit XML to $REQDRIVE_JUNIT_XML; a path
    # (relative to the worktree) is where the runner writes its own report.
    junit: bool | str = False

    @field_validator("junit")
    @classmethod
    def _report_inside_worktree(cls, value: bool | str) -> bool | str:
        if isinstance(value, str):
            path = PurePosixPath(value)
            if not value.strip() or path.is_absolute() or ".." in path.parts:
                raise ValueError("must be a path inside the repository, like reports/junit.xml")
        return value


class GateResult(BaseModel):
    """What one gate did, as the run keeps it (plain JSON, so it survives a checkpoint);
    `tests` is None when the gate gave no per-test results."""

    model_config = ConfigDict(frozen=True)

    name: str
    command: str
    passed: bool
    exit_code: int | None
    timed_out: bool
    duration_s: float
    output_tail: str = ""  # redacted
    tests: dict[str, TestStatus] | None = None
    failures: dict[str, str] = Field(default_factory=dict)  # failed test id -> its output

    @property
    def failed_tests(self) -> list[str] | None:
        """The failed test ids, sorted; None without per-test results."""
        if self.tests is None:
            return None
        return sorted(t for t, status in self.tests.items() if status is TestStatus.FAILED)

    def to_json(self) -> dict[str, Any]:
        """The gate as <label>.gates.json shows it."""
        return {
            "name": self.name,
            "command": self.command,
            "passed": self.passed,
            "exitCode": self.exit_code,
            "timedOut": self.timed_out,
            "durationS": round(self.duration_s, 3),
            "outputTail": self.output_tail,
            "failedTests": self.failed_tests,
            "tests": self.tests,
        }


def gate_environment(
    home: Path, source_env: Mapping[str, str], *, path: str | None = None
) -> dict[str, str]:
    """The gates' environment: a few variables of the worker's, HOME and TMPDIR of their own,
    and PATH as the operator chose it (`path`), so `python` is the interpreter they meant."""
    env = {
        name: value
        for name, value in source_env.items()
        if name in GATE_VARIABLES or name.startswith(GATE_PREFIXES)
    }
    if path:
        env["PATH"] = path
    env.setdefault("PATH", os.defpath)
    tmp = home / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env["HOME"] = str(home)
    env["TMPDIR"] = str(tmp)
    return env


def gate_specs(
    test_command: str | None, lint_command: str | None, gates: Sequence[GateSpec]
) -> list[GateSpec]:
    """The gates of a repository: "tests", "lint", then its custom ones, in that order."""
    specs = []
    if test_command:
        specs.append(GateSpec(name="tests", command=test_command))
    if lint_command:
        specs.append(GateSpec(name="lint", command=lint_command))
    return [*specs, *gates]


def run_gates(
    specs: Sequence[GateSpec],
    *,
    cwd: Path,
    env: Mapping[str, str],
    output_dir: Path,
    label: str,
    redactor: Redactor,
    parallel: bool = False,
    fail_fast: bool = True,
    cancel: threading.Event | None = None,
    sandbox: Sandbox | None = None,
) -> list[GateResult]:
    """Run the gates and save <label>.gates.json and a log per gate in output_dir.

    Sequential and stopping at the first failure by default (gates not run are absent);
    parallel runs every gate at once; fail_fast=False runs every gate one after another.
    """
    output_dir.mkdir(parents=True, exist_ok=True)

    def run_one(spec: GateSpec) -> GateResult:
        return run_gate(
            spec,
            cwd=cwd,
            env=env,
            output_dir=output_dir,
            label=label,
            redactor=redactor,
            cancel=cancel,
            sandbox=sandbox,
        )

    results: list[GateResult] = []
    if parallel and specs:
        with ThreadPoolExecutor(max_workers=len(specs), thread_name_prefix="gate") as pool:
            results = list(pool.map(run_one, specs))
    else:
        for spec in specs:
            if cancel is not None and cancel.is_set():
                break
            results.append(run_one(spec))
            if fail_fast and not results[-1].passed:
                break
    summary = output_dir / f"{label}.gates.json"
    summary.write_text(redactor.redact(json.dumps([r.to_json() for r in results], indent=2)) + "\n")
    return results


def run_gate(
    spec: GateSpec,
    *,
    cwd: Path,
    env: Mapping[str, str],
    output_dir: Path,
    label: str,
    redactor: Redactor,
    cancel: threading.Event | None = None,
    sandbox: Sandbox | None = None,
) -> GateResult:
    """Run one gate with bash in its own process group (in the sandbox, if given: it runs
    the agent's code); read the JUnit XML it leaves."""
    stem = f"{label}.{UNSAFE_NAME_RE.sub('_', spec.name)}"
    log_path = output_dir / f"{stem}.log"
    log_path.unlink(missing_ok=True)  # run_process appends; a re-run replaces the old log
    gate_env = dict(env)
    junit_path = output_dir / f"{stem}.junit.xml"
    # A stale report (an earlier run's, or one the agent committed) must never stand in for
    # this run's results.
    junit_path.unlink(missing_ok=True)
    # In a sandbox the run folder is out of reach: the report goes to the gate's own TMPDIR.
    written = junit_path if sandbox is None else Path(gate_env["TMPDIR"]) / junit_path.name
    written.unlink(missing_ok=True)
    report = cwd / spec.junit if isinstance(spec.junit, str) else None
    if report is not None:
        if report.is_symlink() or report.is_file():
            report.unlink()
    else:
        report = None if sandbox is None else written
        gate_env[PYTEST_ADDOPTS] = f"--junitxml={written}"
        if spec.junit is True:
            gate_env[JUNIT_VAR] = str(written)
    process = run_process(
        ["bash", "-c", spec.command],
        cwd=cwd,
        env=gate_env,
        timeout_s=spec.timeout_s,
        log_path=log_path,
        redactor=redactor,
        cancel=cancel,
        sandbox=sandbox,
    )
    output = process.output_tail
    if report is not None and report.is_file() and not report.is_symlink():
        shutil.copyfile(report, junit_path)  # kept in the run folder; the worktree is reset
    # The XML holds test ids and failure output: redacted on disk before it is read.
    redact_file(junit_path, redactor)
    tests, failures, problem = read_junit(junit_path)
    if problem and spec.junit is not False:  # asked for: its absence is worth saying
        output += f"\n[reqdrive] no per-test results: {problem}\n"
    return GateResult(
        name=spec.name,
        command=redactor.redact(spec.command),  # shown in the PR; config may inline a secret
        passed=process.exit_code == 0 and not process.timed_out,
        exit_code=process.exit_code,
        timed_out=process.timed_out,
        duration_s=process.duration_s,
        output_tail=output,
        tests=tests,
        failures=failures,
    )


def read_junit(
    path: Path,
) -> tuple[dict[str, TestStatus] | None, dict[str, str], str | None]:
    """Each test id ("classname::name") with its status, failed tests' output, or None and
    why there are no per-test results."""
    if not path.is_file():
        return None, {}, f"{path.name} was not written"
    try:
        # The XML comes from the repository's own test run on this machine; the expat bundled
        # with Python 3.11 refuses entity-expansion bombs and ElementTree never fetches
        # external entities, which is what defusedxml would add.
        root = ET.parse(path).getroot()  # noqa: S314
    except (ET.ParseError, OSError) as error:
        return None, {}, f"{path.name} cannot be parsed: {error}"
    if root.tag not in ("testsuites", "testsuite"):
        return None, {}, f"{path.name} is not JUnit XML (root <{root.tag}>)"
    tests: dict[str, TestStatus] = {}
    failures: dict[str, str] = {}
    for case in root.iter("testcase"):
        test_id, status = _test_id(case), _status(case)
        known = tests.get(test_id)
        if known is None or _WORST_FIRST.index(status) < _WORST_FIRST.index(known):
            tests[test_id] = status
        if status is TestStatus.FAILED and len(failures) < FAILURES_KEPT:
            failures[test_id] = _failure_text(case)[-FAILURE_CHARS:]
    return tests, failures, None


def _status(case: ET.Element) -> TestStatus:
    if case.find("failure") is not None or case.find("error") is not None:
        return TestStatus.FAILED
    if case.find("skipped") is not None:
        return TestStatus.SKIPPED
    return TestStatus.PASSED


def _failure_text(case: ET.Element) -> str:
    parts = []
    for tag in ("failure", "error"):
        for element in case.findall(tag):
            message = element.get("message", "")
            parts += [p for p in (message, (element.text or "").strip()) if p]
    return "\n".join(parts)


def _test_id(case: ET.Element) -> str:
    name = case.get("name", "")
    classname = case.get("classname", "")
    return f"{classname}::{name}" if classname else name
