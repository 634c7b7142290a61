"""What reqdrive's pytest plugin recorded of a gate run, read in bounded memory."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from worker.confine.limits import MIB, ResourceLimits
from worker.model.gates import TestStatus

LINE_CHARS = 64 * 1024  # of one record; the plugin cuts a failure's text well below this


@dataclass
class PluginResults:
    """One gate run as the plugin saw it, over every pytest session the command started."""

    started: int = 0
    finished: list[int] = field(default_factory=list)  # each session's exit status
    collected: set[str] = field(default_factory=set)
    tests: dict[str, TestStatus] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    collect_errors: list[str] = field(default_factory=list)
    collect_reports: set[str] = field(default_factory=set)  # files failed or skipped whole
    # Tests reported passed whose test function the plugin saw raise: {id: what it raised}.
    raised_yet_passed: dict[str, str] = field(default_factory=dict)
    problem: str | None = None  # why the file gives no results (too large, unreadable)


def read_plugin_results(path: Path, limits: ResourceLimits) -> PluginResults | None:
    """The plugin's records, or None when it wrote nothing (pytest did not run, or did not
    load the plugin). A file over the report size or test-case limit gives a problem."""
    try:
        size = path.lstat().st_size
    except OSError:
        return None
    found = PluginResults()
    if size > limits.report_mib * MIB:
        found.problem = f"the pytest plugin's results are too large ({size} bytes)"
        return found
    with path.open(encoding="utf-8", errors="replace") as stream:
        for number, line in enumerate(iter(lambda: stream.readline(LINE_CHARS), ""), 1):
            problem = _add(found, line, limits)
            if problem:
                found.problem = f"the pytest plugin's results, line {number}: {problem}"
                return found
    return found


def _add(found: PluginResults, line: str, limits: ResourceLimits) -> str | None:
    """Add one record; why it cannot be read, or None."""
    try:
        record = json.loads(line)
    except ValueError:
        return "not a JSON record"
    if not isinstance(record, dict):
        return "not a JSON object"
    event = record.get("event")
    if event == "start":
        found.started += 1
    elif event == "finish" and isinstance(record.get("exitstatus"), int):
        found.finished.append(record["exitstatus"])
    elif event == "collected" and isinstance(record.get("ids"), list):
        found.collected.update(str(i) for i in record["ids"])
    elif event == "collect":
        test_id = str(record.get("id", ""))
        found.collect_reports.add(test_id)
        if record.get("outcome") == "failed":
            found.collect_errors.append(test_id)
            found.tests[test_id] = TestStatus.FAILED
        elif found.tests.get(test_id) is not TestStatus.FAILED:
            found.tests[test_id] = TestStatus.SKIPPED
    elif event == "report":
        _add_report(found, record)
    else:
        return f"unknown record {str(event)[:40]!r}"
    if len(found.tests) > limits.report_cases or len(found.collected) > limits.report_cases:
        return f"more than {limits.report_cases} tests (REQDRIVE_REPORT_MAX_CASES)"
    return None


def _add_report(found: PluginResults, record: dict[str, object]) -> None:
    """One phase's report: a failure in any phase fails the test; a skip (an xfail included,
    as pytest's JUnit report counts it) skips it; a pass counts only for the call (a test
    whose call never reported has no result)."""
    test_id, outcome = str(record.get("id", "")), record.get("outcome")
    if outcome == "failed":
        found.failures.setdefault(test_id, str(record.get("longrepr", "")))
        found.tests[test_id] = TestStatus.FAILED
    elif outcome == "skipped" and found.tests.get(test_id) is not TestStatus.FAILED:
        found.tests[test_id] = TestStatus.SKIPPED
    elif outcome == "passed" and record.get("when") == "call":
        found.tests.setdefault(test_id, TestStatus.PASSED)
        if record.get("raised"):
            found.raised_yet_passed[test_id] = str(record["raised"])[:80]
