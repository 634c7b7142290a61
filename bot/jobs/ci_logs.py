"""CI's failed jobs read for a fix: redacted, the failing part cut out, test ids, a size cap."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.github.ci_runs import FailedCheck
from worker.confine.redact import Redactor

REPORT_CHARS = 6_000  # of all the failing parts together: they go into the story's prompt
CHECK_CHARS = 3_000  # of one check's part, so one noisy job leaves room for the others
CONTEXT_LINES = 3  # around each error line
TAIL_LINES = 15  # of a log's end, where runners summarise
MAX_TEST_IDS = 50
# Runners colour their output: ANSI escape sequences (CSI "ESC [ ... letter" and OSC "ESC ] ...
# BEL") mean nothing in a prompt or on GitHub and a story's text refuses control characters.
ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b")
# Actions prefixes every log line with its time: "2024-05-01T10:00:00.1234567Z ".
TIMESTAMP_RE = re.compile(r"^\ufeff?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z ")
# pytest's short summary ("FAILED tests/test_x.py::test_y - AssertionError: ..."), also for
# errors in collection or fixtures ("ERROR tests/test_x.py::test_y").
PYTEST_RE = re.compile(r"^(?:FAILED|ERROR) (?P<id>[\w./-]+\.py(?:::[^\s]+)?)(?: - |$)")
BACKTICKS_RE = re.compile(r"`+")
ERROR_RE = re.compile(
    r"##\[error\]|^E\s|^(?:FAILED|ERROR)\s|Traceback \(most recent call last\)|"
    r"\b(?:Error|error|FAIL|Failed|failed)\b[: ]"
)


@dataclass(frozen=True)
class CiFailure:
    """What CI's failure comes to for the fix: the checks, the test ids it named, the text."""

    checks: list[str]
    test_ids: list[str]
    report: str  # Markdown: per check its annotations and the failing part of its log


def read_failure(checks: list[FailedCheck], redactor: Redactor) -> CiFailure:
    """Every check's log redacted before anything reads it, then its failing part kept."""
    test_ids: dict[str, None] = {}
    parts, names = [], []
    for check in checks:
        lines = [TIMESTAMP_RE.sub("", line) for line in _clean(check.log, redactor).splitlines()]
        for line in lines:
            found = PYTEST_RE.match(line.strip())
            if found:
                test_ids.setdefault(found["id"])
        annotations = [_clean(a, redactor) for a in check.annotations]
        names.append(_clean(check.name, redactor).strip())
        parts.append(_part(names[-1], _clean(check.summary, redactor), annotations, lines))
    report = "\n\n".join(parts)
    if len(report) > REPORT_CHARS:
        report = report[:REPORT_CHARS] + "\n… (cut: the whole logs are on GitHub)"
    return CiFailure(names, list(test_ids)[:MAX_TEST_IDS], report)


def _clean(text: str, redactor: Redactor) -> str:
    """CI's text redacted (GitHub masks only the secrets it was given) and uncoloured."""
    return ANSI_RE.sub("", redactor.redact(text))


def failing_part(lines: list[str]) -> list[str]:
    """The error lines with CONTEXT_LINES around each, and the log's last TAIL_LINES, in the
    log's order; "…" where lines were left out."""
    keep: set[int] = set(range(max(len(lines) - TAIL_LINES, 0), len(lines)))
    for number, line in enumerate(lines):
        if ERROR_RE.search(line):
            keep.update(range(max(number - CONTEXT_LINES, 0), number + CONTEXT_LINES + 1))
    shown, last = [], -1
    for number in sorted(n for n in keep if n < len(lines)):
        if number != last + 1:
            shown.append("…")
        shown.append(lines[number])
        last = number
    return shown


def _part(name: str, summary: str, annotations: list[str], lines: list[str]) -> str:
    said = [f"### {name}"]
    if summary.strip():
        said.append(summary.strip())
    said += [f"- {a}" for a in annotations]
    if lines:
        text = "\n".join(failing_part(lines))
        if len(text) > CHECK_CHARS:
            text = "…\n" + text[-CHECK_CHARS:]  # the end, where the summary is
        # A fence longer than any run of backticks in the log, so the log cannot close it.
        fence = "`" * max(3, max((len(r) for r in BACKTICKS_RE.findall(text)), default=0) + 1)
        said.append(f"{fence}\n{text}\n{fence}")
    return "\n".join(said)
