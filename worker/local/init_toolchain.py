"""What `reqdrive init` reads about a project's tests: the runner, whether it is installed, the
runner's own per-test report option, a `src/` layout and monorepo folders."""

from __future__ import annotations

import json
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
# What a coverage wrapper (c8, nyc) starts after its own options.
KNOWN_RUNNERS = frozenset({"node", "mocha", "vitest", "jest", "tape", "ava", "tap", "npm"})
MOCHA_REPORTER_OPTIONS = ("-R", "--reporter", "-O", "--reporter-option", "--reporter-options")
NO_RESULTS = "reports no per-test results"
NODE_LOCKFILES = (
    ("package-lock.json", "npm ci"),
    ("pnpm-lock.yaml", "pnpm install"),
    ("yarn.lock", "yarn install"),
)
MAX_PACKAGES = 30  # workspace packages given a gate each; a larger monorepo picks its own
PLAIN_WORD_RE = re.compile(r"\A[\w./*?@%+,:=-]+\Z")


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


def node_installer(root: Path) -> str:
    """How the project installs node_modules, as its lockfile says."""
    for lockfile, command in NODE_LOCKFILES:
        if (root / lockfile).is_file():
            return command
    return "npm install"


def node_tests(package: dict[str, Any], *, installer: str = "npm ci") -> TestSetup:
    """The test script's runner with its own JUnit report option, when it has one; a script
    chaining `npm run` steps is read through to the step that runs the tests."""
    scripts = _mapping(package, "scripts")
    script = scripts.get("test")
    if not isinstance(script, str) or not script.strip():
        return TestSetup(notes=["package.json has no test script: set testCommand yourself"])
    deps = {**_mapping(package, "devDependencies"), **_mapping(package, "dependencies")}
    install = (
        "the checks need the project's node_modules in the worktree: "
        f"{installer} installs them (npx --no-install never "
        "downloads a runner that is not installed)"
    )
    steps = _steps(script, scripts)
    found = [(step, runner) for step in steps if (runner := _runner_command(step, deps))]
    if len(found) == 1:
        (step, runner), notes = found[0], []
        if step[:1] in (["c8"], ["nyc"]):
            notes.append(f"{step[0]} (coverage) is left out: the checks judge tests")
        others = [" ".join(s) for s in steps if s is not step]
        if others:
            notes.append(
                f"npm test also runs {'; '.join(others)}: add a gate for each that should "
                "judge every story"
            )
        return TestSetup(runner, JUNIT_FILE, [*notes, install])
    jest = next((_unwrapped(s) for s in steps if _unwrapped(s)[:1] == ["jest"]), None)
    if jest is not None:
        # The worker adds jest's own JSON report to a command that starts jest.
        return TestSetup(f"npx --no-install {shlex.join(jest)}", None, [install])
    why = (
        f"npm test ({script}) {NO_RESULTS}, so every story stays unverified: set testCommand "
        "to the runner itself (npx jest, npx vitest run, node --test) or give its JUnit "
        "reporter a file and name it with `junit:`"
    )
    return TestSetup("npm test", None, [why, install])


def _steps(script: str, scripts: dict[str, Any], depth: int = 0) -> list[list[str]]:
    """The commands a script runs, as words: `a && npm run b` read through b's script (two
    levels deep); [] when the script is more than `&&` between plain commands."""
    steps = []
    for part in script.split("&&"):
        if not ONE_COMMAND_RE.match(part) or not part.strip():
            return []
        words = shlex.split(part)
        name = _npm_run_target(words)
        inner = scripts.get(name) if name else None
        if isinstance(inner, str) and depth < 2:
            steps += _steps(inner, scripts, depth + 1) or [words]
        else:
            steps.append(words)
    return steps


def _npm_run_target(words: list[str]) -> str | None:
    if words[:2] in (["npm", "run"], ["npm", "run-script"]) and len(words) == 3:
        return words[2]
    return None


def _unwrapped(words: list[str]) -> list[str]:
    """The command without a coverage wrapper (`c8 --100 node --test` is `node --test`) and
    without npx (a script finds node_modules/.bin itself; a gate's npx must not download)."""
    if words[:1] in (["c8"], ["nyc"]):
        start = next((i for i, w in enumerate(words) if w in KNOWN_RUNNERS), len(words))
        words = words[start:]
    if words[:1] == ["npx"]:
        words = [w for w in words[1:] if w not in ("--no-install", "--no", "-y", "--yes")]
    return words


def _runner_command(step: list[str], deps: dict[str, Any]) -> str | None:
    """The step's runner with its JUnit reporter added, or None."""
    words = _unwrapped(step)
    args = _join(words[1:])
    if words[:2] == ["node", "--test"]:
        reporters = (
            "--test-reporter=spec --test-reporter-destination=stdout "
            f"--test-reporter=junit --test-reporter-destination={JUNIT_FILE}"
        )
        return f"node --test {reporters} {_join(words[2:])}".rstrip()
    if words[:1] == ["vitest"]:
        args = _join(words[2:] if words[1:2] == ["run"] else words[1:])
        # vitest's built-in JUnit reporter; `run` so it never waits in watch mode.
        return (
            f"npx --no-install vitest run {args} --reporter=default "
            f"--reporter=junit --outputFile={JUNIT_FILE}"
        ).replace("  ", " ")
    if words[:1] == ["jest"] and "jest-junit" in deps:
        return (
            f"JEST_JUNIT_OUTPUT_FILE={JUNIT_FILE} npx --no-install jest {args} "
            "--ci --reporters=default --reporters=jest-junit"
        ).replace("  ", " ")
    if words[:1] == ["mocha"]:
        # mocha's built-in xunit reporter writes JUnit XML; it replaces the script's own.
        return (
            f"npx --no-install mocha {_join(_without_reporter(words[1:]))} --reporter xunit "
            f"--reporter-options output={JUNIT_FILE}"
        ).replace("  ", " ")
    return None


def _without_reporter(args: list[str]) -> list[str]:
    """mocha's arguments less its reporter and the reporter's options."""
    kept, skip = [], False
    for word in args:
        if skip:
            skip = False
        elif word in MOCHA_REPORTER_OPTIONS:
            skip = True
        elif not word.startswith(tuple(f"{o}=" for o in MOCHA_REPORTER_OPTIONS)):
            kept.append(word)
    return kept


def _join(words: list[str]) -> str:
    """Words back into a shell line, globs left for the shell (`test/*`) as the script had."""
    return " ".join(w if PLAIN_WORD_RE.match(w) else shlex.quote(w) for w in words)


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


def workspace_gates(root: Path, workspaces: list[str]) -> list[tuple[str, str, str]]:
    """A gate (name, command, report) per workspace package whose test runner init knows,
    run in the package's folder: the top's `npm test --workspaces` gives no per-test results."""
    folders = sorted(
        {
            p.parent
            for w in workspaces
            if not w.startswith("!")
            for p in root.glob(f"{w}/package.json")
        }
    )[:MAX_PACKAGES]
    installer = node_installer(root)
    gates: list[tuple[str, str, str]] = []
    for folder in folders:
        try:
            package = json.loads((folder / "package.json").read_text())
        except (OSError, ValueError):
            continue
        tests = node_tests(package if isinstance(package, dict) else {}, installer=installer)
        if tests.command is None or tests.junit is None:
            continue
        where = folder.relative_to(root).as_posix()
        name = folder.name if all(g[0] != folder.name for g in gates) else where
        if name in ("tests", "lint"):
            name = where
        gates.append(
            (name, f"cd {shlex.quote(where)} && {tests.command}", f"{where}/{tests.junit}")
        )
    return gates


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
