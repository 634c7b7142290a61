"""What a story changed in its tests and in what the gates run: reported, never trusted."""

from __future__ import annotations

import ast
import contextlib
import json
import re
import shlex
import tomllib
from collections.abc import Callable, Collection, Sequence
from pathlib import Path, PurePosixPath

from worker.confine.safe_paths import LinkError, unlink_under
from worker.git.at_commit import read_file_at
from worker.git.runner import run_git
from worker.model.gates import GateSpec
from worker.model.repo_config import matches_any

# Files that decide what a test run runs or how it reports, whatever the gate's command.
GATE_CONFIG_GLOBS = (
    "**/conftest.py",
    "pytest.ini",
    "setup.cfg",
    "tox.ini",
    "noxfile.py",
    ".github/workflows/**",
    ".gitlab-ci.yml",
    ".circleci/**",
    "azure-pipelines.yml",
    "Jenkinsfile",
    "**/jest.config.*",
    "**/vitest.config.*",
    ".config/nextest.toml",
)
# A command's first word that reads its instructions from a file of the repository.
RUNNER_FILES = {
    "make": "Makefile",
    "tox": "tox.ini",
    "nox": "noxfile.py",
    "npm": "package.json",
    "yarn": "package.json",
    "pnpm": "package.json",
    "just": "justfile",
}
# Where test files live, by the usual conventions of pytest, jest, go, cargo and JUnit.
TEST_PATH_RE = re.compile(
    r"(^|/)(tests?|__tests__|spec)/|(^|/)test_[^/]*$|_test\.[^/]+$|\.(test|spec)\.[^/]+$"
    r"|Tests?\.[^/]+$"
)


def changed_files(cwd: Path, pre: str, commit: str) -> list[str]:
    """Paths the story's commit added, changed or deleted."""
    names = run_git(["diff", "--name-only", "--no-renames", "-z", pre, commit], cwd=cwd)
    return sorted(name for name in names.split("\0") if name)


def added_files(cwd: Path, pre: str, commit: str) -> list[str]:
    """Paths the story's commit added (none of them was there before it)."""
    names = run_git(
        ["diff", "--name-only", "--no-renames", "--diff-filter=A", "-z", pre, commit], cwd=cwd
    )
    return sorted(name for name in names.split("\0") if name)


def gate_inputs(
    cwd: Path, pre: str, commit: str, changed: Sequence[str], gates: Sequence[GateSpec]
) -> list[str]:
    """The changed files that decide what a gate runs: test configuration, CI files, and the
    files a gate's command names (its script, its Makefile)."""
    own = _command_files(gates)
    found = []
    for path in changed:
        if path == "pyproject.toml":
            if _section(cwd, pre, path, _toml_tool) != _section(cwd, commit, path, _toml_tool):
                found.append(path)
        elif path == "package.json":
            if _section(cwd, pre, path, _npm_scripts) != _section(cwd, commit, path, _npm_scripts):
                found.append(path)
        elif path in own or matches_any(path, list(GATE_CONFIG_GLOBS)):
            found.append(path)
    return found


def _command_files(gates: Sequence[GateSpec]) -> set[str]:
    files: set[str] = set()
    for gate in gates:
        try:
            words = shlex.split(gate.command)
        except ValueError:  # unbalanced quotes: bash decides; take the plain words
            words = gate.command.split()
        for word in words:
            if word in RUNNER_FILES:
                files.add(RUNNER_FILES[word])
            path = PurePosixPath(word.removeprefix("./"))
            if not path.is_absolute() and ".." not in path.parts and path.suffix:
                files.add(str(path))
    return files


def _section(cwd: Path, sha: str, path: str, pick: Callable[[str], object]) -> object:
    text = read_file_at(cwd, sha, path)
    if text is None:
        return None
    try:
        return pick(text)
    except (ValueError, TypeError):  # unparsable: compare the text itself
        return text


def _toml_tool(text: str) -> object:
    return tomllib.loads(text).get("tool")


def _npm_scripts(text: str) -> object:
    data = json.loads(text)
    return (data.get("scripts"), data.get("jest")) if isinstance(data, dict) else data


def files_with_tests(changed: Sequence[str], added: Collection[str]) -> list[str]:
    """The changed files that hold tests: by the usual naming, or named by an added test's id
    (pytest's `tests.test_x` is `tests/test_x.py`)."""
    modules = {_module_of(t) for t in added}
    return [
        path
        for path in changed
        if TEST_PATH_RE.search(path)
        or any(m and path.removesuffix(".py").replace("/", ".").endswith(m) for m in modules)
    ]


def _module_of(test_id: str) -> str:
    return test_id.split("::", 1)[0] if "::" in test_id else ""


def rewritten_tests(
    cwd: Path, pre: str, commit: str, changed: Collection[str], test_ids: Collection[str]
) -> list[str]:
    """Which of these tests (Python test functions) the story changed: their code, or their
    decorators (a skip mark), compared as syntax trees so moving lines does not count."""
    rewritten = []
    trees: dict[tuple[str, str], list[ast.stmt] | str | None] = {}

    def tree(sha: str, path: str) -> list[ast.stmt] | str | None:
        # Parsed once per file and side: a test file may hold hundreds of tests.
        if (sha, path) not in trees:
            trees[sha, path] = _parse(read_file_at(cwd, sha, path))
        return trees[sha, path]

    for test_id in sorted(test_ids):
        located = _locate(test_id, changed)
        if located is None:
            continue
        path, names = located
        old = _definition(tree(pre, path), names)
        new = _definition(tree(commit, path), names)
        # Not found on either side: a deleted test is judged by its missing result instead.
        if old is not None and new is not None and new != old:
            rewritten.append(test_id)
    return rewritten


def _locate(test_id: str, changed: Collection[str]) -> tuple[str, list[str]] | None:
    """The changed Python file that holds this test, and the class/function names within."""
    if "::" not in test_id:
        return None
    classname, name = test_id.split("::", 1)
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if path in changed:
            return path, [*parts[cut:], name.split("[", 1)[0]]
    return None


def _parse(text: str | None) -> list[ast.stmt] | str | None:
    """A file's top-level statements; None when it is not there, a marker when it does not
    parse (so any change to it counts)."""
    if text is None:
        return None
    try:
        return ast.parse(text).body
    except SyntaxError:
        return "<does not parse>"


def _definition(body: list[ast.stmt] | str | None, names: Sequence[str]) -> str | None:
    """The syntax tree of the named definition (decorators included), as text; None when the
    file or the definition is not there."""
    if body is None or isinstance(body, str):
        return body
    scope = body
    node: ast.stmt | None = None
    for name in names:
        node = next(
            (
                n
                for n in scope
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                and n.name == name
            ),
            None,
        )
        if node is None:
            return None
        scope = node.body if isinstance(node, ast.ClassDef) else []
    return ast.dump(node) if node is not None else None


def restore_paths(cwd: Path, sha: str, paths: Sequence[str]) -> None:
    """Put these files back as they are at sha in the working tree (removing those it lacks)."""
    for path in paths:
        if read_file_at(cwd, sha, path) is not None:
            run_git(["checkout", "--quiet", sha, "--", path], cwd=cwd)
        else:
            with contextlib.suppress(LinkError, FileNotFoundError):
                unlink_under(cwd, path)  # a folder stays, a link goes, never what it names
