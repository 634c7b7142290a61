"""Code that reaches into its test runner: a story's non-test lines naming its machinery."""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Sequence
from importlib import metadata
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
    # pytest itself, and its hooks by name (`pytest_pyfunc_call`, `pytest_runtest_call`).
    (re.compile(r"\b_?pytest(_\w+)?\b|\bpluggy\b|\bpluginmanager\b"), "names pytest's machinery"),
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
            r"|\bPYTEST_ADDOPTS\b|\bPYTEST_PLUGINS\b|\bGOFLAGS\b|--junit-?xml"
        ),
        "names reqdrive's reporter or its reports",
    ),
)
BY_SUFFIX = {
    **dict.fromkeys((".py", ".pyi", ".pyx"), PYTHON),
    **dict.fromkeys((".js", ".mjs", ".cjs", ".jsx", ".ts", ".mts", ".cts", ".tsx"), JS),
    ".go": GO,
}
# Prose and data no check runs: a README that documents REQDRIVE_SANDBOX reaches nothing.
PROSE = frozenset({".md", ".markdown", ".rst", ".txt", ".adoc", ".csv", ".svg"})
SHOWN = 5  # findings named in the reason
# git's C-style escapes in a quoted path (quote_c_style), besides \ooo octal bytes.
C_ESCAPES = {"a": "\a", "b": "\b", "t": "\t", "n": "\n", "v": "\v", "f": "\f", "r": "\r"}


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
            name = _unquoted(text[4:])
            path = name[2:] if name.startswith("b/") else ""
            if not path and name != "/dev/null":  # never skipped unread: said
                found.append(f"{name!r}: a file name the worker cannot read")
        elif text.startswith("@@"):
            match = re.search(r"\+(\d+)", text)
            line = int(match.group(1)) if match else 0
        elif text.startswith("+") and path and not side.covers(path):
            suffix = PurePosixPath(path).suffix.lower()
            rules = () if suffix in PROSE else (*BY_SUFFIX.get(suffix, ()), *ANY)
            for pattern, said in rules:
                finding = f"{path}:{line} {said}"
                if pattern.search(text[1:]) and not any(
                    f.startswith(f"{path}:") and f.endswith(said) for f in found
                ):
                    found.append(finding)
            line += 1
    return found


def _unquoted(name: str) -> str:
    """A path as git prints it in a diff header: as is, or C-quoted ("b/caf\\303\\251.py")
    when it holds a byte outside printable ASCII, a quote or a backslash."""
    if not (len(name) >= 2 and name.startswith('"') and name.endswith('"')):
        return name
    raw, i, body = bytearray(), 0, name[1:-1]
    while i < len(body):
        if body[i] != "\\":
            raw += body[i].encode()
            i += 1
        elif body[i + 1 : i + 4].isdigit() and len(body[i + 1 : i + 4]) == 3:
            raw.append(int(body[i + 1 : i + 4], 8) & 0xFF)
            i += 4
        else:
            raw += C_ESCAPES.get(body[i + 1 : i + 2], body[i + 1 : i + 2]).encode()
            i += 2
    return raw.decode("utf-8", errors="surrogateescape")


def reach_note(found: Sequence[str]) -> str:
    """The needs-review reason for what runner_reach found."""
    more = len(found) - SHOWN
    listed = "; ".join(found[:SHOWN]) + (f"; and {more} more" if more > 0 else "")
    return (
        f"its code reaches into the test runner ({listed}): code in the test process can "
        "forge what the tests report, so a person reads it before it counts"
    )


# Modules a check imports from outside the worktree that a new module at the top of the
# worktree (first on `python -m pytest`'s path) or of `src/` would replace: the runner itself
# (`pytest.py` there runs instead of pytest, and may start the real one with a plugin of its
# own), the standard library, and whatever the setup installed.
RUNNER_MODULES = frozenset({"pytest", "_pytest", "pluggy", "py", "xdist", "hypothesis"})
RUNNER_DISTRIBUTION = "pytest"
IMPORT_ROOTS = ("src/", "")  # the longest first: src/x.py is module x


def shadowing(
    cwd: Path, pre: str, commit: str, side: TestSide, installed: frozenset[str]
) -> list[str]:
    """The story's new files outside the test side that make a module of that name, where it
    would be imported before the real one: "pytest.py shadows the module pytest"."""
    added = run_git(
        ["diff", "--name-only", "--no-renames", "--diff-filter=A", "-z", pre, commit], cwd=cwd
    )
    known = RUNNER_MODULES | runner_requirements() | frozenset(sys.stdlib_module_names) | installed
    found: list[str] = []
    for path in sorted(p for p in added.split("\0") if p and not side.covers(p)):
        name = _module_name(path)
        if name is not None and name in known:
            found.append(f"{path} shadows the module {name} the checks import from elsewhere")
    return found


@functools.cache
def runner_requirements() -> frozenset[str]:
    """The top-level modules of what pytest requires, as installed beside the worker
    (iniconfig, packaging, pygments...): pytest imports them at its start, before any test,
    so a module of that name at the worktree's top runs in its place."""
    try:
        requires = metadata.distribution(RUNNER_DISTRIBUTION).requires or []
    except metadata.PackageNotFoundError:
        return frozenset()
    wanted = {  # what it always requires, not its test extras
        re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0].lower()
        for r in requires
        if "extra ==" not in r.replace('"', "").replace("'", "")
    }
    return frozenset(
        module
        for module, distributions in metadata.packages_distributions().items()
        if any(d.lower().replace("_", "-") in wanted for d in distributions)
    )


def _module_name(path: str) -> str | None:
    """The top-level module a Python file makes from an import root: `x.py`, `x/...py`."""
    for root in IMPORT_ROOTS:
        if not path.startswith(root) or not path.endswith((".py", ".pyc", ".so")):
            continue
        parts = PurePosixPath(path[len(root) :]).parts
        if len(parts) == 1:
            return parts[0].split(".", 1)[0]
        if len(parts) > 1:
            return parts[0]
    return None


def installed_modules(worktree: Path, kept: Sequence[str]) -> frozenset[str]:
    """The top-level module names in the setup's site-packages folders (links not followed)."""
    names: set[str] = set()
    for top in kept:
        for where, dirs, files in os.walk(worktree / top.rstrip("/"), followlinks=False):
            if os.path.basename(where) == "site-packages":
                names.update(d for d in dirs if d.isidentifier())
                names.update(f.split(".", 1)[0] for f in files if f.endswith((".py", ".so")))
                dirs[:] = []
            dirs[:] = [d for d in dirs if d not in ("__pycache__", "node_modules")]
    return frozenset(names)


def what_reaches(
    cwd: Path, pre: str, commit: str, side: TestSide, kept: Sequence[str]
) -> list[str]:
    """Both: the lines that name the runner's machinery, the modules that shadow another."""
    installed = installed_modules(cwd, kept)
    return runner_reach(cwd, pre, commit, side) + shadowing(cwd, pre, commit, side, installed)
