"""Test, lint and custom gates, run by the worker, never trusted to the agent."""

from __future__ import annotations

import json
import re
import threading
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from worker.processes import run_process
from worker.redact import Redactor, redact_file

JUNIT_VAR = "REQDRIVE_JUNIT_XML"
UNSAFE_NAME_RE = re.compile(r"[^A-Za-z0-9._-]+")


class GateSpec(BaseModel):
    """One check the worker runs in the worktree: a bash command with a timeout."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    name: str = Field(min_length=1)
    command: str = Field(min_length=1)  # run with bash -c, in the worktree
    timeout_s: float = Field(
        default=900, gt=0, validation_alias=AliasChoices("timeout", "timeoutS", "timeout_s")
    )
    # The command writes JUnit XML to $REQDRIVE_JUNIT_XML, so failures are known per test.
    junit: bool = False


class GateResult(BaseModel):
    """What one gate did, as the run keeps it (plain JSON, so it survives a checkpoint);
    `failed_tests` (sorted) is None when there are no per-test results."""

    model_config = ConfigDict(frozen=True)

    name: str
    command: str
    passed: bool
    exit_code: int | None
    timed_out: bool
    duration_s: float
    output_tail: str = ""  # redacted
    failed_tests: list[str] | None = None

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
        }


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
) -> GateResult:
    """Run one gate with bash in its own process group; parse its JUnit XML if it writes one."""
    stem = f"{label}.{UNSAFE_NAME_RE.sub('_', spec.name)}"
    log_path = output_dir / f"{stem}.log"
    log_path.unlink(missing_ok=True)  # run_process appends; a re-run replaces the old log
    gate_env = dict(env)
    junit_path = output_dir / f"{stem}.junit.xml"
    if spec.junit:
        # A stale file from an earlier run must never stand in for this run's results.
        junit_path.unlink(missing_ok=True)
        gate_env[JUNIT_VAR] = str(junit_path)
    process = run_process(
        ["bash", "-c", spec.command],
        cwd=cwd,
        env=gate_env,
        timeout_s=spec.timeout_s,
        log_path=log_path,
        redactor=redactor,
        cancel=cancel,
    )
    output = process.output_tail
    failed: frozenset[str] | None = None
    if spec.junit:
        # The XML holds test ids and failure output: redacted on disk before it is read.
        redact_file(junit_path, redactor)
        failed, problem = _failed_tests(junit_path)
        if problem:
            output += f"\n[reqdrive] no per-test results: {problem}\n"
    return GateResult(
        name=spec.name,
        command=redactor.redact(spec.command),  # shown in the PR; config may inline a secret
        passed=process.exit_code == 0 and not process.timed_out,
        exit_code=process.exit_code,
        timed_out=process.timed_out,
        duration_s=process.duration_s,
        output_tail=output,
        failed_tests=None if failed is None else sorted(failed),
    )


def _failed_tests(path: Path) -> tuple[frozenset[str] | None, str | None]:
    """Ids ("classname::name") of failed or errored test cases, or None and why not."""
    if not path.is_file():
        return None, f"{path.name} was not written"
    try:
        # The XML comes from the repository's own test run on this machine; the expat bundled
        # with Python 3.11 refuses entity-expansion bombs and ElementTree never fetches
        # external entities, which is what defusedxml would add.
        root = ET.parse(path).getroot()  # noqa: S314
    except (ET.ParseError, OSError) as error:
        return None, f"{path.name} cannot be parsed: {error}"
    if root.tag not in ("testsuites", "testsuite"):
        return None, f"{path.name} is not JUnit XML (root <{root.tag}>)"
    failed = set()
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed.add(_test_id(case))
    return frozenset(failed), None


def _test_id(case: ET.Element) -> str:
    name = case.get("name", "")
    classname = case.get("classname", "")
    return f"{classname}::{name}" if classname else name
