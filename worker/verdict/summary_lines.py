"""The runner's own summary line in the gate's log, held against the collected results.

The log is written by the worker as the output streams by: a test process that rewrites a
report when it exits cannot take back the summary line the runner already printed."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from worker.confine.limits import MIB
from worker.model.gates import Runner, TestStatus
from worker.verdict.collected import Collected

ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
COUNT_RE = re.compile(r"(?P<count>[0-9]{1,9}) (?P<word>[a-z]+)")
# pytest's last line: "1 failed, 4 passed, 1 xfailed in 0.34s" (-q) or the same between
# "=" rules; "no tests ran in 0.01s".
PYTEST_LINE_RE = re.compile(
    r"^=* ?(?P<counts>(?:[0-9]+ [a-z]+(?:, )?)+|no tests ran) in [0-9.]+s(?: \([^)]*\))? ?=*$"
)
JEST_LINE_RE = re.compile(r"^Tests:\s+(?P<counts>.*total)$")
VITEST_LINE_RE = re.compile(r"^\s*Tests\s+(?P<counts>[0-9].*)\([0-9]+\)$")
LINE_RE = {Runner.PYTEST: PYTEST_LINE_RE, Runner.JEST: JEST_LINE_RE, Runner.VITEST: VITEST_LINE_RE}
LINE_CHARS = 4096  # of one log line read; a summary line is short
SCAN_MIB = 64  # of the log (the most the worker writes of one gate's output)


def summary_counts(log: Path, runner: Runner) -> list[Counter[str]]:
    """Each summary line the runner printed in the log, as counts by word ("failed",
    "passed", "errors"...)."""
    pattern = LINE_RE.get(runner)
    if pattern is None:
        return []
    found = []
    read = 0
    try:
        with log.open(encoding="utf-8", errors="replace") as stream:
            for line in iter(lambda: stream.readline(LINE_CHARS), ""):
                read += len(line)
                if read > SCAN_MIB * MIB:
                    break
                match = pattern.match(ANSI_RE.sub("", line).rstrip("\n"))
                if match:
                    found.append(_counts(match["counts"]))
    except OSError:
        return []
    return found


def _counts(text: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for match in COUNT_RE.finditer(text):
        word = match["word"]
        counts[word if word != "error" else "errors"] += int(match["count"])
    return counts


def summary_disagreements(found: Collected, log: Path, runner: Runner | None) -> list[str]:
    """Where the runner's summary lines disagree with the collected results: more lines than
    sessions ran, or other counts of failed and passed tests. No line (a quiet option): no
    check."""
    if runner is None or found.tests is None:
        return []
    lines = summary_counts(log, runner)
    if not lines:
        return []
    if len(lines) > found.sessions:
        return [f"the log holds {len(lines)} summary lines of {runner} for {found.sessions} run(s)"]
    said = Counter[str]()
    for counts in lines:
        said.update(counts)
    mine = Counter(found.tests.values())
    failed, passed = mine[TestStatus.FAILED], mine[TestStatus.PASSED]
    if runner is Runner.PYTEST:
        told_failed = said["failed"] + said["errors"]
        told_passed = said["passed"] + said["xpassed"]
    else:
        told_failed, told_passed = said["failed"], said["passed"]
    # pytest counts a test whose call passed and whose teardown failed as passed and an error.
    slack = said["errors"] if runner is Runner.PYTEST else 0
    if (failed > 0) != (told_failed > 0) or not passed <= told_passed <= passed + slack:
        return [
            f"{runner}'s summary in the log says {told_failed} failed and {told_passed} passed; "
            f"the results say {failed} failed and {passed} passed"
        ]
    return []
