"""Per-test results of `go test -json`, read from the gate's log as its events stream by."""

from __future__ import annotations

import json
import re
from pathlib import Path

from worker.confine.limits import MIB, ResourceLimits
from worker.model.gates import TestStatus
from worker.verdict.collected import Collected

LINE_CHARS = 256 * 1024  # of one log line; test2json's lines are far shorter
OUTPUT_CHARS = 16_000  # of one failed test's output
BUILD_FAILED_RE = re.compile(r"^FAIL\s+(?P<package>\S+) \[(?:build|setup) failed\]")
ENDS = {"pass": TestStatus.PASSED, "fail": TestStatus.FAILED, "skip": TestStatus.SKIPPED}


def read_go_events(log: Path, limits: ResourceLimits) -> Collected:
    """Each test as "package::TestName" (subtests "package::TestName/sub"), its status and a
    failed test's output. Lines that are not test2json events (the build's own errors on
    stderr) are passed over. A test that started but never ended, or a package that failed
    without a failing test, is named: the runner, not the tests, decided that run."""
    try:
        size = log.lstat().st_size
    except OSError:
        return Collected.none(f"{log.name} was not written")
    if size > limits.report_mib * MIB:
        return Collected.none(f"{log.name} is too large for its go test events ({size} bytes)")
    found = Collected({}, {})
    tests: dict[str, TestStatus] = {}
    started: set[str] = set()
    output: dict[str, list[str]] = {}
    failed_packages: list[str] = []
    seen_any = False
    with log.open(encoding="utf-8", errors="replace") as stream:
        for line in iter(lambda: stream.readline(LINE_CHARS), ""):
            event = _event(line)
            unbuilt = BUILD_FAILED_RE.match(line)
            if unbuilt:  # before go 1.24, a package that does not build sends no event
                seen_any = True
                failed_packages.append(unbuilt["package"])
            if event is None:
                continue
            seen_any = True
            action, package, test = event
            if not test and action == "fail":
                failed_packages.append(package)
            test_id = f"{package}::{test}"
            if not test and action != "output":
                continue
            if action == "run":
                started.add(test_id)
            elif action == "output":
                kept = output.setdefault(test_id, [])
                kept.append(str(json.loads(line).get("Output", "")))
                del kept[:-200]
            elif action in ENDS:
                tests[test_id] = ENDS[action]
                found.listed[ENDS[action]] += 1
            if len(started) > limits.report_cases:
                return Collected.none(f"{log.name} has more than {limits.report_cases} tests")
    if not seen_any:
        return Collected.none("the log holds no go test -json events")
    found.tests = tests
    for test_id, status in tests.items():
        if status is TestStatus.FAILED:
            found.failures[test_id] = "".join(output.get(test_id, []))[-OUTPUT_CHARS:]
    unended = sorted(started - set(tests))
    if unended:
        found.disagreements.append(f"tests started but never ended: {_few(unended)}")
    failing = {t.partition("::")[0] for t, s in tests.items() if s is TestStatus.FAILED}
    broken = sorted(set(failed_packages) - failing)
    found.collect_errors += broken
    for package in broken:  # a build failure, a TestMain that exited: shown as failed
        tests[package] = TestStatus.FAILED
        found.failures[package] = "".join(output.get(f"{package}::", []))[-OUTPUT_CHARS:]
    found.runner_failed = bool(failed_packages)
    return found


def _event(line: str) -> tuple[str, str, str] | None:
    """(action, package, test) of a test2json event line, or None for any other line."""
    if not line.startswith('{"'):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if not isinstance(event, dict) or not isinstance(event.get("Action"), str):
        return None
    return event["Action"], str(event.get("Package", "")), str(event.get("Test", "") or "")


def _few(ids: list[str]) -> str:
    return ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
