"""Code that reaches into its test runner: a story's non-test lines naming its machinery."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from worker.git.runner import run_git
from worker.verdict.test_side import TestSide

# The story's code runs inside the test process, beside the worker's reporter: code that
# patches pytest's reports or hooks, registers a plugin, traces the tests or ends the process
# early can make every report agree (docs/verification.md, "What this cannot prove"). What it
# has to name to do so is looked for in the lines the story added outside the test side. A
# match is a flag for a person (the story needs review), never a verdict on the code: code
# that hides the names (built from strings at run time) is not found, and honest code that
# names them (a pytest helper library) is flagged.
PYTHON = (
    (re.compile(r"\b_?pytest\b|\bpluggy\b|\bpluginmanager\b"), "names pytest's machinery"),
    (re.compile(r"\bsys\.(settrace|setprofile|excepthook)\b"), "traces or hooks the running code"),
    (re.compile(r"\batexit\b|\bos\._exit\b"), "acts as the test process exits"),
    (re.compile(r"\bgc\.get_(objects|referrers)\b"), "searches the process's objects"),
)
JS = (
    (
        re.compile(r"\b(vitest|jest|@jest|node:test|VITEST\w*|JEST_WORKER_ID)\b"),
        "names its test runner",
    ),
    (
        re.compile(r"\bprocess\.(exit|reallyExit|on\(\s*['\"](exit|beforeExit))"),
        "acts as the test process exits",
    ),
)
GO = (
    (re.compile(r"\"testing\"|\bflag\.Lookup\(\s*\"test\."), "names go test's machinery"),
    (re.compile(r"\bos\.Exit\b"), "ends the process"),
)
# In any file: the worker's own reporter and the reports it reads.
ANY = (
    (
        re.compile(
            r"\breqdrive_results\b|\bREQDRIVE_[A-Z_]+|pytest-results\.jsonl|report\.junit\.xml"
            r"|\bPYTEST_ADDOPTS\b|\bGOFLAGS\b|--junit-?xml"
        ),
        "names reqdrive's reporter or its reports",
    ),
)
BY_SUFFIX = {
    **dict.fromkeys((".py", ".pyi", ".pyx"), PYTHON),
    **dict.fromkeys((".js", ".mjs", ".cjs", ".jsx", ".ts", ".mts", ".cts", ".tsx"), JS),
    ".go": GO,
}
SHOWN = 5  # findings named in the reason


def runner_reach(cwd: Path, pre: str, commit: str, side: TestSide) -> list[str]:
    """The story's added lines outside the test side that name the test runner's machinery:
    "calc.py:12 names pytest's machinery", one per file and kind."""
    diff = run_git(
        ["diff", "--no-color", "--no-renames", "--unified=0", pre, commit, "--"], cwd=cwd
    )
    found: list[str] = []
    path, line = "", 0
    for text in diff.splitlines():
        if text.startswith("+++ "):
            name = text[4:]
            path = name[2:] if name.startswith("b/") else ""
        elif text.startswith("@@"):
            match = re.search(r"\+(\d+)", text)
            line = int(match.group(1)) if match else 0
        elif text.startswith("+") and path and not side.covers(path):
            rules = (*BY_SUFFIX.get(PurePosixPath(path).suffix, ()), *ANY)
            for pattern, said in rules:
                finding = f"{path}:{line} {said}"
                if pattern.search(text[1:]) and not any(
                    f.startswith(f"{path}:") and f.endswith(said) for f in found
                ):
                    found.append(finding)
            line += 1
    return found


def reach_note(found: Sequence[str]) -> str:
    """The needs-review reason for what runner_reach found."""
    more = len(found) - SHOWN
    listed = "; ".join(found[:SHOWN]) + (f"; and {more} more" if more > 0 else "")
    return (
        f"its code reaches into the test runner ({listed}): code in the test process can "
        "forge what the tests report, so a person reads it before it counts"
    )
