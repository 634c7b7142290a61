"""The test side: which files define or configure a repository's tests, and their test part."""

from __future__ import annotations

import configparser
import json
import re
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from worker.model.repo_config import matches_any

# `testPaths` defaults, per ecosystem as `reqdrive init` detects them (a glob matches from the
# top; `**/` spans folders). A repository without `testPaths` gets every ecosystem's.
ECOSYSTEM_TEST_PATHS: dict[str, tuple[str, ...]] = {
    "python": (
        "**/test_*.py",
        "**/*_test.py",
        "**/conftest.py",
        "**/tests/**",
        "**/test/**",
        "noxfile.py",
        ".coveragerc",
    ),
    "javascript": (
        "**/*.test.*",
        "**/*.spec.*",
        "**/__tests__/**",
        "**/test/**",
    ),
    "go": ("**/*_test.go", "**/testdata/**"),
    "rust": ("tests/**", ".config/nextest.toml"),
}
# What marks an ecosystem in the repository's file list.
ECOSYSTEM_MARKERS: dict[str, tuple[str, ...]] = {
    "python": ("pyproject.toml", "setup.py", "setup.cfg", "tox.ini", "**/*.py"),
    "javascript": ("**/package.json",),
    "go": ("**/go.mod",),
    "rust": ("**/Cargo.toml",),
}
# On the test side whatever `testPaths` says: what pytest and Python read before any test
# runs or collect as tests wherever they are (a conftest, a doctest file, a pytest config in
# any folder, a startup hook, packaging metadata, whose `pytest11` entry points pytest loads
# as plugins from any folder on sys.path), the JS runners' configs and what transforms their
# tests (vite's config is vitest's when it has none of its own; babel's rewrites every test
# jest loads).
ALWAYS_TEST_PATHS = (
    "**/conftest.py",
    "**/test*.txt",  # pytest collects these as doctests by default (--doctest-glob)
    "**/pytest.ini",
    "**/.pytest.ini",
    "**/pytest.toml",
    "**/.pytest.toml",
    "**/sitecustomize.py",
    "**/usercustomize.py",
    "**/*.pth",
    "**/*.dist-info/**",
    "**/*.egg-info/**",
    "**/entry_points.txt",
    "**/jest.config.*",
    "**/jest.setup.*",
    "**/vitest.config.*",
    "**/vitest.workspace.*",
    "**/vitest.setup.*",
    "**/vite.config.*",
    "**/babel.config.*",
    "**/.babelrc*",
    "**/karma.conf.*",
    "**/playwright.config.*",
    "**/cypress.config.*",
    "**/.mocharc*",
    "**/ava.config.*",
    "**/testdata/**",
)
# Files that are code and test settings at once: only their test part is on the test side.
PYPROJECT_TEST_TABLES = ("pytest", "tox", "coverage")  # under [tool]
# The entry-point group pytest loads plugins from: a plugin the package itself registers
# (`[project.entry-points.pytest11]`, setup.cfg's `pytest11 =` in [options.entry_points]).
PYTEST_ENTRY_POINTS = "pytest11"
INI_TEST_SECTION_RE = re.compile(
    r"^(pytest|tool:pytest|tox|tox:.*|testenv|testenv:.*|coverage:.*)$"
)
PACKAGE_TEST_KEYS = ("scripts", "jest", "ava", "mocha", "vitest", "c8", "nyc")
TOML_HEADER_RE = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
INI_HEADER_RE = re.compile(r"^\[([^\]]+)\]")


# A test module: a file of tests that the runner collects by itself and that no other test
# reads (pytest's default python_files, the JS runners' *.test.* / *.spec.* files).
TEST_MODULE_RE = re.compile(
    r"(^|/)(test_[^/]*\.py|[^/]*_test\.py|[^/]*\.(test|spec)\.[cm]?[jt]sx?)$"
)


class Unsplittable(ValueError):
    """A mixed file whose test part and the rest cannot be told apart line by line."""


@dataclass(frozen=True)
class TestSide:
    """A repository's test side: whole files by glob, and the mixed files' test part."""

    __test__ = False  # a domain name, not a test class for pytest to collect

    globs: tuple[str, ...]

    @classmethod
    def of(cls, test_paths: Sequence[str] | None) -> TestSide:
        """`testPaths` as configured (None: every ecosystem's defaults), always-guarded too."""
        chosen = default_test_paths(ECOSYSTEM_TEST_PATHS) if test_paths is None else test_paths
        return cls(tuple(dict.fromkeys([*chosen, *ALWAYS_TEST_PATHS])))

    def covers(self, path: str) -> bool:
        """Is this whole file on the test side?"""
        return matches_any(path, list(self.globs))

    def reaches(self, path: str) -> bool:
        """Is this path, or anything a folder here holds, on the test side? (A link to a
        folder is refused wherever it is: frozen_side.py.)"""
        return self.covers(path) or self.covers(f"{path}/x")


def test_modules_only(changed: Sequence[str], root: Path) -> list[str]:
    """The changed files, when every one is a test module still there as a plain file (new or
    changed: no conftest, config, helper, fixture, data or mixed file, nothing deleted); else
    []. Such a change cannot by itself change how another test is collected or configured."""
    modules = [
        path
        for path in changed
        if TEST_MODULE_RE.search(path)
        and not matches_any(path, list(ALWAYS_TEST_PATHS))
        and (root / path).is_file()
        and not (root / path).is_symlink()
    ]
    return modules if changed and len(modules) == len(changed) else []


def default_test_paths(ecosystems: Iterable[str]) -> list[str]:
    """The `testPaths` defaults of these ecosystems, in order, each glob once."""
    return list(dict.fromkeys(g for e in ecosystems for g in ECOSYSTEM_TEST_PATHS[e]))


def detect_ecosystems(files: Sequence[str]) -> list[str]:
    """The ecosystems a repository's file list shows (python, javascript, go, rust)."""
    return [
        e
        for e, marks in ECOSYSTEM_MARKERS.items()
        if any(matches_any(f, list(marks)) for f in files)
    ]


def is_mixed(path: str) -> bool:
    """A file of code and test settings at once (pyproject.toml, setup.cfg, tox.ini,
    package.json): only its test part is on the test side."""
    return PurePosixPath(path).name in MIXED


def test_part(path: str, text: str | None) -> object:
    """The test settings of a mixed file, for comparison; the text itself if unparsable."""
    return _split(path, text)[0]


def splice(path: str, *, tests_from: str | None, rest_from: str | None) -> str | None:
    """The mixed file with the test part of `tests_from` and everything else of `rest_from`
    (None: no such file); Unsplittable when that cannot be made and checked."""
    tests, rest = _split(path, tests_from), _split(path, rest_from)
    if tests[0] == rest[0]:
        return rest_from
    if tests[1] == rest[1]:
        return tests_from
    kind = MIXED[PurePosixPath(path).name]
    made = kind.merge(tests_from or "", rest_from or "")
    got = _split(path, made)
    if got[0] != tests[0] or got[1] != rest[1]:
        raise Unsplittable(path)
    return made


def _split(path: str, text: str | None) -> tuple[object, object]:
    if text is None:
        return None, None
    try:
        return MIXED[PurePosixPath(path).name].split(text)
    except (ValueError, TypeError, configparser.Error):
        return text, text  # unparsable: any change counts on both sides


@dataclass(frozen=True)
class _Kind:
    split: Callable[[str], tuple[object, object]]
    merge: Callable[[str, str], str]


def _toml_split(text: str) -> tuple[object, object]:
    doc = tomllib.loads(text)
    tool = dict(doc.get("tool") or {})
    tests = {k: tool.pop(k) for k in PYPROJECT_TEST_TABLES if k in tool}
    rest = {**doc, "tool": tool} if tool else {k: v for k, v in doc.items() if k != "tool"}
    project = dict(rest.get("project") or {})
    points = dict(project.get("entry-points") or {})
    if PYTEST_ENTRY_POINTS in points:
        tests["entry-points"] = points.pop(PYTEST_ENTRY_POINTS)
        project["entry-points"] = points
        rest["project"] = project
    return tests or None, rest


def _ini_split(text: str) -> tuple[object, object]:
    parser = configparser.RawConfigParser()
    parser.read_string(text)
    sections = {name: dict(parser[name]) for name in parser.sections()}
    tests = {k: v for k, v in sections.items() if INI_TEST_SECTION_RE.match(k)}
    points = sections.get("options.entry_points", {})
    if PYTEST_ENTRY_POINTS in points:  # split by key: the block merge cannot (Unsplittable)
        tests["options.entry_points"] = {PYTEST_ENTRY_POINTS: points.pop(PYTEST_ENTRY_POINTS)}
    rest = {k: v for k, v in sections.items() if not INI_TEST_SECTION_RE.match(k)}
    return tests or None, (rest, dict(parser.defaults()))


def _json_split(text: str) -> tuple[object, object]:
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not an object")
    tests = {k: data[k] for k in PACKAGE_TEST_KEYS if k in data}
    return tests or None, {k: v for k, v in data.items() if k not in PACKAGE_TEST_KEYS}


def _json_merge(tests_from: str, rest_from: str) -> str:
    data = json.loads(rest_from) if rest_from.strip() else {}
    tests = json.loads(tests_from) if tests_from.strip() else {}
    for key in PACKAGE_TEST_KEYS:
        data.pop(key, None)
        if key in tests:
            data[key] = tests[key]
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _blocks_merge(
    header: re.Pattern[str], is_test: Callable[[str], bool]
) -> Callable[[str, str], str]:
    """Line by line: the rest's blocks without test sections, then the test sections."""

    def blocks(text: str) -> list[tuple[str | None, list[str]]]:
        found: list[tuple[str | None, list[str]]] = [(None, [])]
        for line in text.splitlines(keepends=True):
            match = header.match(line)
            if match:
                found.append((match.group(1).replace('"', "").replace(" ", ""), []))
            found[-1][1].append(line)
        return found

    def merge(tests_from: str, rest_from: str) -> str:
        kept = [lines for name, lines in blocks(rest_from) if name is None or not is_test(name)]
        tests = [lines for name, lines in blocks(tests_from) if name is not None and is_test(name)]
        text = "".join(line for lines in kept for line in lines)
        if text and not text.endswith("\n"):
            text += "\n"
        return text + "".join(line for lines in tests for line in lines)

    return merge


def _toml_test_table(name: str) -> bool:
    return name == f"project.entry-points.{PYTEST_ENTRY_POINTS}" or any(
        name == f"tool.{t}" or name.startswith(f"tool.{t}.") for t in PYPROJECT_TEST_TABLES
    )


MIXED: dict[str, _Kind] = {
    "pyproject.toml": _Kind(_toml_split, _blocks_merge(TOML_HEADER_RE, _toml_test_table)),
    "setup.cfg": _Kind(
        _ini_split, _blocks_merge(INI_HEADER_RE, lambda n: bool(INI_TEST_SECTION_RE.match(n)))
    ),
    "tox.ini": _Kind(
        _ini_split, _blocks_merge(INI_HEADER_RE, lambda n: bool(INI_TEST_SECTION_RE.match(n)))
    ),
    "package.json": _Kind(_json_split, _json_merge),
}
