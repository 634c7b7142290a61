"""A gate's JUnit report: each test id's status, failed tests' output and where they failed."""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from worker.confine.limits import DEFAULT_LIMITS, ResourceLimits
from worker.confine.redact import Redactor
from worker.model.control_chars import CONTROL_RE
from worker.model.gates import SITE_MESSAGE_CHARS, SITE_PATH_CHARS, FailureSite, TestStatus
from worker.verdict.junit_stream import Unreadable, report_too_large, streamed_cases, too_many_cases

FAILURE_CHARS = 4_000  # of one failed test's output, kept for the next attempt's prompt
FAILURES_KEPT = 50  # failed tests whose output is kept per gate
# Of one failure's text, read before redacting and cutting to FAILURE_CHARS: a test may print
# megabytes into its failure message.
FAILURE_TEXT_CHARS = 256 * 1024
# Where a failure happened, as tracebacks and runners print it: Python's `File "x.py", line 3`,
# and `path:line` words (pytest, go test, jest's stack frames, rustc, PHPUnit). Words first,
# then a plain match on each: a single pattern over the text backtracks badly on hostile output.
PYTHON_FRAME_RE = re.compile(r'File "(?P<path>[^"\n]{1,300})", line (?P<line>[0-9]{1,7})')
WORD_RE = re.compile(r"[^\s\"'()<>\[\],]{3,300}")
PLACE_RE = re.compile(r"(?P<path>[^:]+\.[A-Za-z0-9_]{1,16}):(?P<line>[0-9]{1,7})(?::[0-9]+)?:?")
LINE_RE = re.compile(r"[0-9]{1,7}")
LOCATIONS_TRIED = 20  # places in one failure's output looked up in the worktree
LOCATION_SCAN_CHARS = 20_000  # of one failure's output; the test's own frame comes first

# When a runner reports one id twice (parametrized names, retries), the worst result counts.
_WORST_FIRST = (TestStatus.FAILED, TestStatus.SKIPPED, TestStatus.PASSED)


class JUnitReport(NamedTuple):
    """What a gate's JUnit XML says: each test id's status (None: no per-test results, and
    `problem` says why), failed tests' output, and where they failed when that is known."""

    tests: dict[str, TestStatus] | None
    failures: dict[str, str]
    sites: dict[str, FailureSite]
    problem: str | None


def read_junit(
    path: Path,
    repository: Path | None = None,
    redactor: Redactor | None = None,
    limits: ResourceLimits = DEFAULT_LIMITS,
) -> JUnitReport:
    """Each test id ("classname::name") with its status, failed tests' output and, given the
    worktree the tests ran in, where in it they failed. The file is redacted before it is
    read; `redactor` redacts again what XML escapes (`&#x67;hp_…`) hid from that.

    Read as a stream, each test case dropped once counted: the agent's code writes the
    report, and a million cases parsed whole would take the worker's memory. A report over
    its size or test-case limit gives no per-test results ("too large")."""
    redact = redactor.redact if redactor is not None else str
    too_large = report_too_large(path, limits)
    if too_large is not None:
        return JUnitReport(None, {}, {}, too_large)
    if not path.is_file():
        return JUnitReport(None, {}, {}, f"{path.name} was not written")
    tests: dict[str, TestStatus] = {}
    failures: dict[str, str] = {}
    sites: dict[str, FailureSite] = {}
    try:
        for case, from_zero in streamed_cases(path):
            if len(tests) >= limits.report_cases and _test_id(case) not in tests:
                return JUnitReport(None, {}, {}, too_many_cases(path, limits))
            _read_case(case, from_zero, tests, failures, sites, repository, redact)
    except Unreadable as error:
        return JUnitReport(None, {}, {}, str(error))
    except (ET.ParseError, OSError) as error:
        return JUnitReport(None, {}, {}, f"{path.name} cannot be parsed: {error}")
    return JUnitReport(tests, failures, sites, None)


def _read_case(
    case: ET.Element,
    from_zero: bool,
    tests: dict[str, TestStatus],
    failures: dict[str, str],
    sites: dict[str, FailureSite],
    repository: Path | None,
    redact: Callable[[str], str],
) -> None:
    """Add one test case's status, and for the first failures their output and site."""
    test_id, status = _test_id(case), _status(case)
    known = tests.get(test_id)
    if known is None or _WORST_FIRST.index(status) < _WORST_FIRST.index(known):
        tests[test_id] = status
    if status is not TestStatus.FAILED or len(failures) >= FAILURES_KEPT:
        return
    # Redacted whole, then cut: a cut could leave half a secret no pattern knows.
    failures[test_id] = redact(_failure_text(case)[-FAILURE_TEXT_CHARS:])[-FAILURE_CHARS:]
    site = _failure_site(case, repository, from_zero) if repository else None
    if site is not None:
        file, line = site
        reason = _cut(redact(_short_reason(case)), SITE_MESSAGE_CHARS)
        if redact(file) == file:  # a file named like a secret is not shown
            sites[test_id] = FailureSite(path=file, line=line, message=reason)


def _failure_site(case: ET.Element, repository: Path, from_zero: bool) -> tuple[str, int] | None:
    """The first place the failure's output names in the test's own file (when the report
    names that file), else the test's own line, else the first place inside the repository.
    Every path must be a file of the worktree: the report is the agent's code's to write."""
    own = _repository_file(case.get("file", ""), repository)
    places = []
    for raw, line in itertools.islice(_places(_failure_text(case)), LOCATIONS_TRIED):
        path = own if own is not None and raw == own else _repository_file(raw, repository)
        if path is not None and line >= 1:
            places.append((path, line))
    place = next((p for p in places if p[0] == own), None)
    declared = case.get("line", "")
    if place is None and own is not None and LINE_RE.fullmatch(declared):
        place = (own, int(declared) + from_zero)
    if place is None and own is None and places:
        place = places[0]
    return place if place is not None and place[1] >= 1 else None


def _places(text: str) -> Iterator[tuple[str, int]]:
    """Every (path, line) the output names, in the order it names them."""
    text = text[:LOCATION_SCAN_CHARS]
    found = [(m.start(), m["path"], int(m["line"])) for m in PYTHON_FRAME_RE.finditer(text)]
    for word in WORD_RE.finditer(text):
        place = PLACE_RE.fullmatch(word.group())
        if place is not None:
            found.append((word.start(), place["path"], int(place["line"])))
    return ((path, line) for _, path, line in sorted(found))


def _repository_file(raw: str, repository: Path) -> str | None:
    """`raw` as a path relative to the repository if it names one of its files, else None
    (absolute paths outside it, `..`, `.git`, symlinks leading out, folders, control
    characters)."""
    if not raw or len(raw) > SITE_PATH_CHARS or CONTROL_RE.search(raw):
        return None
    path = Path(raw)
    if path.is_absolute():
        for base in (repository, repository.resolve()):
            if path.is_relative_to(base):
                path = path.relative_to(base)
                break
        else:
            return None
    relative = PurePosixPath(path.as_posix())
    if not relative.parts or {"..", ".git"} & set(relative.parts):
        return None
    full = repository / relative
    try:
        inside = full.resolve().is_relative_to(repository.resolve()) and full.is_file()
    except OSError:  # a name too long for the file system, a loop of symlinks
        return None
    return str(relative) if inside and len(str(relative)) <= SITE_PATH_CHARS else None


def _short_reason(case: ET.Element) -> str:
    """The failure's reason in a few lines: its `message`, else the start of its output."""
    for element in [*case.findall("failure"), *case.findall("error")]:
        for text in (element.get("message", ""), element.text or ""):
            lines = [CONTROL_RE.sub("", line).strip() for line in text.splitlines()]
            reason = "\n".join(line for line in lines if line)
            if reason:
                return reason
    return ""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
