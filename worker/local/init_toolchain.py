"""What `reqdrive init` reads about a project's tests: the runner, whether it is installed, the
runner's own per-test report option, a `src/` layout and monorepo folders."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SKIPPED_DIRS = frozenset({".git", ".reqdrive", "node_modules", "vendor", "target", ".venv"})
JUNIT_FILE = "reqdrive-junit.xml"  # written by the runner in the worktree, read by the worker
MAX_FILES_READ = 2000  # test files opened to tell unittest from pytest; enough for any suite
# Where a Python project names its dependencies and test tools.
PYTHON_DECLARATIONS = (
    "pyproject.toml",
    "setup.cfg",
    "setup.py",
    "tox.ini",
    "Pipfile",
    "requirements.txt",
    "requirements-dev.txt",
    "requirements-test.txt",
    "dev-requirements.txt",
    "test-requirements.txt",
)
PYTEST_FILES = ("pytest.ini", "conftest.py", "tests/conftest.py", "test/conftest.py")
PYTEST_RE = re.compile(r"\bpytest\b")
# A unittest suite: a TestCase class (a pytest suite may import unittest for its mock alone).
UNITTEST_RE = re.compile(r"^class \w+\((?:unittest\.)?\w*TestCase\b", re.MULTILINE)
# A test script that is one command (no `&&`, `;` or pipe), whose runner we can add options to.
ONE_COMMAND_RE = re.compile(r"\A[^&;|<>`$()]+\Z")
PYTHON_TEST_NAMES = ("test_*.py", "*_test.py")


@dataclass
class TestSetup:
    """A test command, the JUnit file it writes (None: the worker collects results itself, or
    none come), and what the user must know or install."""

    __test__ = False  # a domain name, not a test class for pytest to collect

    command: str | None = None
    junit: str | None = None
    notes: list[str] = field(default_factory=list)


def python_tests(root: Path) -> TestSetup:
    """pytest when the project declares it or has no unittest suite; else unittest, said."""
    found = TestSetup()
    declared = _declares_pytest(root)
    suite = _unittest_files(root)
    prefix = _src_prefix(root, found)
    if declared or not suite:
        # The worker asks pytest for JUnit XML itself (PYTEST_ADDOPTS): no report path needed.
        found.command = f"{prefix}python -m pytest -q"
        if not declared:
            found.notes.append(
                "pytest must be installed where the checks run (the project does not declare "
                "it): pip install pytest"
            )
        return found
    folder = Path(suite[0]).parts[0] if len(Path(suite[0]).parts) > 1 else "."
    discover = (
        ""
        if folder == "." or (root / folder / "__init__.py").is_file()
        else (f" discover -s {shlex.quote(folder)}")
    )
    found.command = f"{prefix}python -m unittest{discover}"
    found.notes.append(
        f"a unittest suite ({suite[0]}) and no pytest among the dependencies: unittest gives "
        "no per-test results, so every story stays unverified; pytest runs the same tests "
        "and gives them: pip install pytest, then testCommand: "
        f'"{prefix}python -m pytest -q"'
    )
    return found


def _declares_pytest(root: Path) -> bool:
    if any((root / name).is_file() for name in PYTEST_FILES):
        return True
    texts = [root / name for name in PYTHON_DECLARATIONS]
    texts += sorted((root / "requirements").glob("*.txt"))
    return any(p.is_file() and PYTEST_RE.search(p.read_text(errors="replace")) for p in texts)


def _unittest_files(root: Path) -> list[str]:
    """Test files that import unittest, relative to the top, in order."""
    found = []
    for path in project_files(root, PYTHON_TEST_NAMES):
        if UNITTEST_RE.search(path.read_text(errors="replace")):
            found.append(path.relative_to(root).as_posix())
    return found


def _src_prefix(root: Path, found: TestSetup) -> str:
    """`PYTHONPATH=src ` for a src/ layout, so the checks import the worktree's code: an
    editable install from the user's checkout (or any installed copy) would win otherwise."""
    src = root / "src"
    packages = sorted(
        p.name for p in src.glob("*") if (p / "__init__.py").is_file() or p.suffix == ".py"
    )
    if not packages:
        return ""
    found.notes.append(
        f"a src/ layout ({', '.join(packages)}): the checks run with src/ first on "
        "PYTHONPATH so they import the worktree's code, not an installed copy (pip install "
        "-e . installs from your checkout, not from reqdrive's worktree); its dependencies "
        "must be installed where the checks run: pip install -e ."
    )
    return "PYTHONPATH=src "


def node_tests(package: dict[str, Any]) -> TestSetup:
    """The test script's runner with its own JUnit report option, when it has one."""
    scripts = package.get("scripts")
    script = scripts.get("test") if isinstance(scripts, dict) else None
    if not isinstance(script, str) or not script.strip():
        return TestSetup(notes=["package.json has no test script: set testCommand yourself"])
    deps = {**_mapping(package, "devDependencies"), **_mapping(package, "dependencies")}
    words = shlex.split(script) if ONE_COMMAND_RE.match(script) else []
    runner = _runner_command(words, deps)
    install = (
        "the checks need the project's node_modules in the worktree: npm ci installs them "
        "(npx --no-install never downloads a runner that is not installed)"
    )
    if runner is not None:
        return TestSetup(runner, JUNIT_FILE, [install])
    if words[:1] == ["jest"]:
        # The worker adds jest's own JSON report to a command that starts jest.
        return TestSetup(f"npx --no-install {shlex.join(words)}", None, [install])
    why = (
        f"npm test ({script}) reports no per-test results, so every story stays unverified: "
        "set testCommand to the runner itself (npx jest, npx vitest run, node --test) or give "
        "its JUnit reporter a file and name it with `junit:`"
    )
    return TestSetup("npm test", None, [why, install])


def _runner_command(words: list[str], deps: dict[str, Any]) -> str | None:
    """The one-command test script with its runner's JUnit reporter added, or None."""
    if words[:2] == ["node", "--test"]:
        reporters = (
            "--test-reporter=spec --test-reporter-destination=stdout "
            f"--test-reporter=junit --test-reporter-destination={JUNIT_FILE}"
        )
        return f"node --test {reporters} {shlex.join(words[2:])}".rstrip()
    if words[:1] == ["vitest"]:
        args = words[2:] if words[1:2] == ["run"] else words[1:]
        # vitest's built-in JUnit reporter; `run` so it never waits in watch mode.
        return (
            f"npx --no-install vitest run {shlex.join(args)} --reporter=default "
            f"--reporter=junit --outputFile={JUNIT_FILE}"
        ).replace("  ", " ")
    if words[:1] == ["jest"] and "jest-junit" in deps:
        return (
            f"JEST_JUNIT_OUTPUT_FILE={JUNIT_FILE} npx --no-install jest {shlex.join(words[1:])} "
            "--ci --reporters=default --reporters=jest-junit"
        ).replace("  ", " ")
    return None


def monorepo_folders(root: Path, package: dict[str, Any]) -> tuple[str, list[str]]:
    """Where the project says its packages are (package.json workspaces), or the folders
    holding a pyproject.toml below the top; with what said so."""
    workspaces = package.get("workspaces")
    if isinstance(workspaces, dict):
        workspaces = workspaces.get("packages")
    if isinstance(workspaces, list) and workspaces:
        return "package.json workspaces", [str(w) for w in workspaces]
    nested = sorted(
        p.parent.relative_to(root).as_posix()
        for p in project_files(root, ("pyproject.toml",))
        if p.parent != root
    )
    if len(nested) > 1 or (nested and (root / "pyproject.toml").is_file()):
        return "pyproject.toml files", nested
    return "", []


def project_files(root: Path, patterns: tuple[str, ...]) -> Iterator[Path]:
    """The project's files matching any pattern, in order, never looking into dependency and
    tool folders (a node_modules holds more files than the project)."""
    seen = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in sorted(files):
            if seen >= MAX_FILES_READ:
                return
            if any(Path(name).match(p) for p in patterns):
                seen += 1
                yield Path(folder) / name


def _mapping(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}
