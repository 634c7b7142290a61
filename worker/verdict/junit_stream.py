"""A JUnit report read as a stream, in bounded memory, or refused as too large."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

from worker.confine.limits import MIB, ResourceLimits

# These bound what one element may hold on to while the report streams by.
MAX_REPORT_DEPTH = 32  # testsuites > testsuite > testcase > failure, and room for nesting
MAX_CASE_ELEMENTS = 1_000  # elements inside one test case (failures, skips, outputs)


def report_too_large(path: Path, limits: ResourceLimits) -> str | None:
    """Why this report is refused unread ("too large: ..."), or None."""
    try:
        size = path.lstat().st_size
    except OSError:
        return None
    if size <= limits.report_mib * MIB:
        return None
    return (
        f"{path.name} is too large ({size} bytes; the limit is {limits.report_mib} MiB, "
        f"set by REQDRIVE_REPORT_MAX_MIB): report too large, no per-test results"
    )


def too_many_cases(path: Path, limits: ResourceLimits) -> str:
    return (
        f"{path.name} is too large (more than {limits.report_cases} test cases, the limit "
        f"set by REQDRIVE_REPORT_MAX_CASES): report too large, no per-test results"
    )


class Unreadable(Exception):
    """Why a report gives no per-test results (the message), found while reading it."""


def streamed_cases(path: Path) -> Iterator[tuple[ET.Element, bool]]:
    """Each complete <testcase>, and whether pytest wrote it (its `line` counts from 0).

    What the caller has seen is dropped: an element is cleared and taken from its parent
    when it ends, except inside a test case, which is kept (up to MAX_CASE_ELEMENTS
    elements) until it ends. So the worker holds one case and the path to it, whatever the
    report's size."""
    # The XML comes from the repository's own test run on this machine; the expat bundled
    # with Python 3.11 refuses entity-expansion bombs and ElementTree never fetches external
    # entities, which is what defusedxml would add.
    open_elements: list[ET.Element] = []
    pytest_suites = 0
    case_depth: int | None = None  # where in open_elements the case being read is
    case_elements = 0
    for event, element in ET.iterparse(path, events=("start", "end")):  # noqa: S314
        if event == "start":
            if not open_elements and element.tag not in ("testsuites", "testsuite"):
                raise Unreadable(f"{path.name} is not JUnit XML (root <{element.tag}>)")
            if len(open_elements) >= MAX_REPORT_DEPTH:
                raise Unreadable(f"{path.name}: elements nested too deep; report too large")
            if case_depth is None and element.tag == "testcase":
                case_depth, case_elements = len(open_elements), 0
            case_elements += 1
            if case_depth is not None and case_elements > MAX_CASE_ELEMENTS:
                raise Unreadable(f"{path.name}: a test case too large; report too large")
            open_elements.append(element)
            pytest_suites += element.tag == "testsuite" and element.get("name") == "pytest"
            continue
        open_elements.pop()
        pytest_suites -= element.tag == "testsuite" and element.get("name") == "pytest"
        if case_depth is not None and len(open_elements) > case_depth:
            continue  # part of the case being read
        if case_depth is not None:
            case_depth = None
            yield element, pytest_suites > 0
        if open_elements:
            element.clear()
            open_elements[-1].remove(element)
