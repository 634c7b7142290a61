"""Per-test results of jest's and vitest's JSON report (`--json`, `--reporter=json`)."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

from worker.confine.limits import MIB, ResourceLimits
from worker.model.gates import TestStatus
from worker.verdict.collected import Collected

# What each assertion status is as the worker counts tests: a test not run for any reason
# (skipped, pending, todo, disabled) is skipped.
STATUSES = {
    "passed": TestStatus.PASSED,
    "failed": TestStatus.FAILED,
    "skipped": TestStatus.SKIPPED,
    "pending": TestStatus.SKIPPED,
    "todo": TestStatus.SKIPPED,
    "disabled": TestStatus.SKIPPED,
    "focused": TestStatus.PASSED,
}
FAILURE_TEXT_CHARS = 16_000  # of one failure's messages


def read_js_report(path: Path, worktree: Path, limits: ResourceLimits) -> Collected:
    """Each test as "file::describe > name" (the file relative to the worktree), its status,
    failed tests' messages, and where the report's own counts disagree with its tests."""
    try:
        size = path.lstat().st_size
    except OSError:
        return Collected.none(f"{path.name} was not written")
    if size > limits.report_mib * MIB:
        return Collected.none(f"{path.name} is too large ({size} bytes): report too large")
    try:
        report = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except ValueError as error:
        return Collected.none(f"{path.name} cannot be parsed: {error}")
    if not isinstance(report, dict) or not isinstance(report.get("testResults"), list):
        return Collected.none(f"{path.name} is not a jest/vitest JSON report")
    found = Collected({}, {})
    for suite in report["testResults"]:
        if not isinstance(suite, dict):
            return Collected.none(f"{path.name}: a test file's entry is not an object")
        _add_suite(found, suite, worktree)
        if len(found.tests or {}) > limits.report_cases:
            return Collected.none(f"{path.name} has more than {limits.report_cases} tests")
    found.disagreements += _count_disagreements(report, found)
    found.runner_failed = report.get("success") is False
    return found


def _add_suite(found: Collected, suite: dict[str, Any], worktree: Path) -> None:
    """One test file: its tests, or the file itself as a failed test when it did not load."""
    tests, failures = found.tests if found.tests is not None else {}, found.failures
    file = _relative(str(suite.get("name", "")), worktree)
    results = suite.get("assertionResults") or []
    if suite.get("status") == "failed" and not results:
        tests[file] = TestStatus.FAILED  # the file failed before any test ran in it
        failures[file] = str(suite.get("message", ""))[-FAILURE_TEXT_CHARS:]
        found.collect_errors.append(file)
        return
    for result in results if isinstance(results, list) else []:
        if not isinstance(result, dict):
            continue
        titles = [*(result.get("ancestorTitles") or []), result.get("title", "")]
        # vitest puts the file's own (nameless) suite first
        test_id = f"{file}::" + " > ".join(str(t) for t in titles if t)
        status = STATUSES.get(str(result.get("status")), TestStatus.FAILED)
        if tests.get(test_id) is not TestStatus.FAILED:
            tests[test_id] = status
        found.listed[status] += 1
        if status is TestStatus.FAILED:
            messages = result.get("failureMessages") or []
            failures[test_id] = "\n".join(str(m) for m in messages)[-FAILURE_TEXT_CHARS:]


def _count_disagreements(report: dict[str, Any], found: Collected) -> list[str]:
    """The report's totals against the tests it lists: a report edited by hand rarely keeps
    both in step."""
    # Failed tests only: vitest counts a skipped test among numPassedTests.
    counted = {"numFailedTests": found.listed[TestStatus.FAILED]}
    said = []
    for key, count in counted.items():
        value = report.get(key)
        if isinstance(value, int) and value != count:
            said.append(f"the report's {key} is {value}, but it lists {count} such tests")
    return said


def _relative(name: str, worktree: Path) -> str:
    """The test file's path relative to the worktree, as the report names it otherwise."""
    path = PurePosixPath(name)
    for base in (worktree, worktree.resolve()):
        if path.is_relative_to(base):
            return str(path.relative_to(base))
    return name
