"""`reqdrive init`: a commented .github/reqdrive.yml from what the checkout shows, and a template
requirement."""

from __future__ import annotations

import json
import shlex
import shutil
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from worker.exceptions import PreflightError
from worker.local.init_setup import suggested_setup
from worker.local.init_toolchain import (
    NO_RESULTS,
    monorepo_folders,
    node_installer,
    node_tests,
    project_files,
    python_tests,
    workspace_gates,
)
from worker.model.repo_config import DEFAULT_FORBIDDEN_PATHS
from worker.model.requirement_files import DEFAULT_REQUIREMENTS_DIR, is_requirement_name
from worker.verdict.test_side import default_test_paths

# init's stack names, as the test side's ecosystems.
ECOSYSTEMS = {"python": "python", "node": "javascript", "go": "go", "cargo": "rust"}

CONFIG_FILE = ".github/reqdrive.yml"
EXAMPLE_NAME = "REQ-001-example.md"
NOTE_WIDTH = 96  # a note's lines as comments in the YAML
# Written, commented out, when no test command was found: `reqdrive validate` refuses the
# config until testCommand is set (a live placeholder would run as a broken bash line).
TEST_COMMAND_PLACEHOLDER = "# testCommand: <the command that runs your tests, such as make test>"
PYTHON_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", "pytest.ini", "tox.ini")
PROJECT_MARKERS = ("package.json", "go.mod", "Cargo.toml", *PYTHON_MARKERS)
EXAMPLE_REQUIREMENT = """\
# REQ-001: <one line saying what to build>

## Why

<Who needs this and what they cannot do today.>

## What

- <A behaviour a user can observe, one per line.>
- <Another one.>

## Done when

- <A check a reviewer (or a test) can make: "GET /export returns a CSV with a header row".>

## Out of scope

- <What this requirement deliberately leaves alone.>
"""


@dataclass
class Detected:
    """What init found in the checkout, each with the reason it was chosen."""

    stack: str = ""  # "" when no known project was found
    test_command: str | None = None
    lint_command: str | None = None
    junit: str | None = None  # a report path the test command writes, when it writes one
    setup: tuple[str, str] | None = None  # a suggested `setup` command and how to use it
    requirements_dir: str = DEFAULT_REQUIREMENTS_DIR
    notes: list[str] = field(default_factory=list)
    # A monorepo's packages, each a gate: (name, command run in its folder, its report path).
    package_gates: list[tuple[str, str, str]] = field(default_factory=list)


def project_folder(root: Path, cwd: Path) -> Path:
    """The folder init reads: the nearest one from `cwd` up to the top that holds a project
    (a package of a monorepo, when init runs in it), else the top."""
    top, here = root.resolve(), cwd.resolve()
    for folder in (here, *here.parents):
        if not folder.is_relative_to(top) or folder == top:
            break
        if any((folder / name).is_file() for name in PROJECT_MARKERS):
            return folder
    return top


def detect(root: Path, folder: Path | None = None) -> Detected:
    """The test and lint commands and the requirements folder, from the checkout's files:
    the project in `folder` (the top by default), the requirements anywhere."""
    found = Detected()
    here = root if folder is None else folder
    if (here / "package.json").is_file():
        _node(here, found)
    elif (here / "go.mod").is_file():
        _go(found)
    elif (here / "Cargo.toml").is_file():
        _cargo(found)
    elif any((here / name).is_file() for name in PYTHON_MARKERS):
        _python(here, found)
    else:
        found.notes.append("no pytest, npm, go or cargo project found: set testCommand yourself")
    _monorepo(root, found, at_top=here.resolve() == root.resolve())
    found.setup = suggested_setup(here, found.stack)
    if here.resolve() != root.resolve():
        _in_folder(found, here.resolve().relative_to(root.resolve()).as_posix())
    existing = sorted(
        p.parent for p in project_files(root, ("REQ-*.md",)) if is_requirement_name(p.name)
    )
    if existing:
        found.requirements_dir = existing[0].relative_to(root).as_posix()
    return found


def _in_folder(found: Detected, folder: str) -> None:
    """The checks of a package below the top: each command starts in its folder (the worker
    runs them at the top of the worktree), the report path names it."""
    cd = f"cd {shlex.quote(folder)} && "
    found.test_command = cd + found.test_command if found.test_command else None
    found.lint_command = cd + found.lint_command if found.lint_command else None
    found.junit = f"{folder}/{found.junit}" if found.junit else None
    if found.setup is not None:
        found.setup = (cd + found.setup[0], found.setup[1])
    found.notes.append(
        f"init ran in {folder}, a package of this repository: its checks run in that folder; "
        "run init at the top to check the whole repository"
    )


def described(found: Detected) -> str:
    """ "a python project", "a project of no kind init knows": how init names what it found."""
    return f"a {found.stack} project" if found.stack else "a project of no kind init knows"


def _package_json(root: Path) -> dict[str, Any]:
    """package.json's top object, or {} when there is none or it cannot be read."""
    try:
        package = json.loads((root / "package.json").read_text())
    except (ValueError, OSError):
        return {}
    return package if isinstance(package, dict) else {}


def _monorepo(root: Path, found: Detected, *, at_top: bool) -> None:
    source, folders = monorepo_folders(root, _package_json(root))
    if folders and at_top and source.startswith("package.json") and found.junit is None:
        found.package_gates = workspace_gates(root, folders)
    if found.package_gates:
        found.notes.append(
            f"a monorepo ({source}: {', '.join(folders)}): `{found.test_command}` at the top "
            "gives no per-test results, so each package's tests are a gate of their own, run "
            "in its folder with its runner's report"
        )
        found.test_command = None
        found.notes = [n for n in found.notes if NO_RESULTS not in n]  # the gates give them
    elif folders:
        found.notes.append(
            f"a monorepo ({source}: {', '.join(folders)}): the checks run at the top; if the "
            "top's test command does not test every package, add a gate per package "
            "(gates: - name: <package>, command: cd <folder> && <its test command>)"
        )


def _python(root: Path, found: Detected) -> None:
    found.stack = "python"
    tests = python_tests(root)
    found.test_command, found.junit = tests.command, tests.junit
    found.notes += tests.notes
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text(errors="replace") if pyproject.is_file() else ""
    if "[tool.ruff" in text or (root / "ruff.toml").is_file():
        found.lint_command = "ruff check ."
    elif (root / ".flake8").is_file():
        found.lint_command = "flake8"


def _node(root: Path, found: Detected) -> None:
    found.stack = "node"
    package = _package_json(root)
    tests = node_tests(package, installer=node_installer(root))
    found.test_command, found.junit = tests.command, tests.junit
    found.notes += tests.notes
    scripts = package.get("scripts")
    if isinstance(scripts, dict) and "lint" in scripts:
        found.lint_command = "npm run lint"


def _go(found: Detected) -> None:
    found.stack = "go"
    found.test_command = "go test ./..."  # the worker adds -json and reads each test's result
    found.lint_command = "go vet ./..."


def _cargo(found: Detected) -> None:
    found.stack = "cargo"
    if shutil.which("cargo-nextest"):
        found.test_command = "cargo nextest run --profile ci"
        found.junit = "target/nextest/ci/junit.xml"
        found.notes.append(
            "nextest writes JUnit only with [profile.ci.junit] in .config/nextest.toml"
        )
    else:
        found.test_command = "cargo test"
        found.notes.append(
            "cargo test reports no per-test results: cargo-nextest with a JUnit profile gives them"
        )
    found.lint_command = "cargo clippy -- -D warnings"


def render_config(found: Detected) -> str:
    """The commented YAML written to .github/reqdrive.yml."""
    lines = [
        "# reqdrive's settings for this repository, read from the base branch (the agent cannot",
        f"# change them on its own branch). Written by `reqdrive init` for {described(found)};",
        "# check it with `reqdrive validate`. Every key: docs/configuration.md in reqdrive.",
        "",
        "# Where REQ-*.md requirements live; a push adding or changing one starts a run.",
        f"requirementsDir: {found.requirements_dir}",
        "",
        *_setup_lines(found),
    ]
    if found.package_gates:
        lines += [
            "# The checks the worker runs after every story: one per package, each writing",
            "# JUnit XML, so every story is judged test by test.",
            "gates:",
        ]
        for name, command, junit in found.package_gates:
            lines += [
                f"  - name: {json.dumps(name)}",
                f"    command: {json.dumps(command)}",
                f"    junit: {junit}",
            ]
    elif found.test_command and found.junit:
        lines += [
            "# The checks the worker runs after every story. This one writes JUnit XML, so",
            "# every story is judged test by test.",
            "gates:",
            "  - name: tests",
            f"    command: {json.dumps(found.test_command)}",
            f"    junit: {found.junit}",
        ]
    elif found.test_command:
        lines += [
            "# The test command the worker runs after every story (the gate `tests`).",
            f"testCommand: {json.dumps(found.test_command)}",
        ]
    else:
        lines += [
            "# The test command the worker runs after every story: init found none, and",
            "# `reqdrive validate` refuses this file until you set it.",
            TEST_COMMAND_PLACEHOLDER,
        ]
    for note in found.notes:  # never split an option (`--no-install`) across two lines
        lines += [f"# {line}" for line in textwrap.wrap(note, NOTE_WIDTH, break_on_hyphens=False)]
    lines.append("")
    if found.lint_command:
        lines += [
            "# Run after the tests (the gate `lint`).",
            f"lintCommand: {json.dumps(found.lint_command)}",
        ]
    else:
        lines += ["# lintCommand: make lint"]
    lines += [
        "",
        *_test_side_lines(found),
        "# Paths the agent may not change: its writes there are reverted and reported.",
        "forbiddenPaths:",
        *[f'  - "{glob}"' for glob in (*DEFAULT_FORBIDDEN_PATHS, CONFIG_FILE)],
        "",
        "# Limits per run.",
        "maxIterations: 10",
        "maxStoryRetries: 3",
        "# budgetUsd: 5",
        "",
    ]
    return "\n".join(lines)


def _test_side_lines(found: Detected) -> list[str]:
    """The detected test side, commented out: unset, every ecosystem's defaults apply."""
    ecosystem = ECOSYSTEMS.get(found.stack)
    globs = default_test_paths([ecosystem]) if ecosystem else []
    lines = [
        "# The test side: the files that define or configure tests. Each story's tests are",
        "# written first, proven failing and frozen; its code is judged on them as frozen",
        "# (conftest.py, pytest configs, sitecustomize.py, *.pth and the test settings of",
        "# pyproject.toml, setup.cfg, tox.ini and package.json are always on it).",
    ]
    if globs:
        lines += ["# testPaths:", *[f'#   - "{glob}"' for glob in globs]]
    checks = []
    if found.stack == "python":
        checks = [
            "# Each story's commit judged on the pytest files its change reaches by import,",
            "# and the whole suite once on the branch's head, where a test it finds broken is",
            "# traced to the story that broke it. `whole` runs the whole suite on every",
            "# story's commit: a break no import shows is then caught in time for a retry.",
            "checks: affected",
            "",
        ]
    return [
        *lines,
        "# `together` writes tests and code in one agent call; the PR then says so.",
        "# tests: first",
        "",
        *checks,
    ]


def _setup_lines(found: Detected) -> list[str]:
    """The suggested setup, commented out: it installs the project, which you decide."""
    if found.setup is None:
        return []
    command, note = found.setup
    text = (
        "Run in the worktree before the checks (sandboxed, package registries reachable), so "
        f"they import this branch's code; uncomment to use it. {note[:1].upper()}{note[1:]}."
    )
    wrapped = textwrap.wrap(text, NOTE_WIDTH, break_on_hyphens=False)
    return [*[f"# {line}" for line in wrapped], f"# setup: {json.dumps(command)}", ""]


def init_repository(
    root: Path, *, force: bool = False, folder: Path | None = None
) -> tuple[list[Path], Detected]:
    """Write the config and the example requirement; refuse to replace either without force.
    `folder`: the project to read, when init runs in a package below the top."""
    found = detect(root, folder)
    files = {
        root / CONFIG_FILE: render_config(found),
        root / found.requirements_dir / EXAMPLE_NAME: EXAMPLE_REQUIREMENT,
    }
    present = [p for p in files if p.exists()]
    if present and not force:
        names = ", ".join(p.relative_to(root).as_posix() for p in present)
        verb = "exists" if len(present) == 1 else "exist"
        raise PreflightError(f"{names} already {verb}; pass --force to replace them")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return list(files), found
