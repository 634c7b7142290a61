"""Lint findings read from a gate's output, so a story is judged on the findings it adds."""

from __future__ import annotations

import re
from collections import Counter

from worker.confine.processes import TAIL_CHARS
from worker.model.gates import GateResult

# `path:line[:col]: message`: ruff (concise), flake8, pylint, mypy, eslint --format unix,
# golangci-lint. The path holds no blank and looks like a file (a dot or a slash), so a
# code excerpt or a log line's `Error:` is not taken for one.
FINDING_RE = re.compile(
    r"^(?P<path>[^\s:]*[./][^\s:]*):(?P<line>[0-9]{1,7})(?::[0-9]{1,7})?:\s*(?P<message>\S.*)$"
)
# ruff's default (full) format and rustc/clippy: the message on its own line, then
# ` --> path:line:col` under it.
ARROW_RE = re.compile(r"^\s*-->\s*(?P<path>[^\s:]+):(?P<line>[0-9]{1,7})(?::[0-9]{1,7})?\s*$")
# ESLint's default (stylish) format: the file's path alone on a line, then its findings
# indented as `line:col  error|warning  message  rule`.
FILE_RE = re.compile(r"^[^\s:]*[./][^\s:]*\.[A-Za-z0-9]{1,16}$")
STYLISH_RE = re.compile(r"^\s+[0-9]{1,7}:[0-9]{1,7}\s+(?P<message>(?:error|warning)\s.*)$")
ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# A message may name another line ("redefinition of unused `x` from line 3"): moved code
# must not make it new.
LINE_WORD_RE = re.compile(r"\bline [0-9]+\b")
SHOWN = 5  # new findings named in a story's reason


def findings(output: str) -> Counter[str] | None:
    """Each finding the output names, as `path: message` (its line and column dropped, so
    moved code is the same finding), with how often; None when none can be read, or when the
    output was cut to its tail (what was cut off may hold the findings it seems to add)."""
    if len(output) >= TAIL_CHARS:
        return None
    found: Counter[str] = Counter()
    previous = file = ""  # the last line with text; the file a stylish block is about
    for raw in output.splitlines():
        line = ANSI_RE.sub("", raw).rstrip()
        finding = _read(line, previous, file)
        if finding is not None:
            found[finding] += 1
        file = line if FILE_RE.match(line) else file if line else ""
        previous = line.strip() or previous
    return found or None


def _read(line: str, previous: str, file: str) -> str | None:
    """The finding this line names, in any of the formats above, or None."""
    if match := FINDING_RE.match(line):
        return _finding(match["path"], match["message"])
    if (arrow := ARROW_RE.match(line)) and previous:
        return _finding(arrow["path"], previous)
    if (stylish := STYLISH_RE.match(line)) and file:
        return _finding(file, stylish["message"])
    return None


def new_findings(before: GateResult, after: GateResult) -> list[str] | None:
    """The findings `after` names more often than `before` did, in the order it names them;
    None when either side's output names none that can be read (a gate that passed names
    none at all)."""
    if after.passed:
        return []
    now = findings(after.output_tail)
    was: Counter[str] | None = Counter() if before.passed else findings(before.output_tail)
    if now is None or was is None:
        return None
    return list((now - was).elements())


def listed(new: list[str]) -> str:
    """New findings as a story's reason names them, up to SHOWN."""
    names = "; ".join(new[:SHOWN])
    more = len(new) - SHOWN
    count = f"{len(new)} new finding{'s' * (len(new) != 1)}"
    return f"{count}: {names}" + (f"; and {more} more" if more > 0 else "")


def _finding(path: str, message: str) -> str:
    # Blanks collapsed: aligned formats pad a message by the widest one beside it.
    message = " ".join(LINE_WORD_RE.sub("line N", message).split())
    return f"{path.removeprefix('./')}: {message}"
