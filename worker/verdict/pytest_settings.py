"""The pytest settings that decide which files hold tests and what every test loads: test
file patterns, doctest collection, plugins named in a config file."""

from __future__ import annotations

import configparser
import fnmatch
import shlex
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

# pytest's own default `python_files`.
DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")
# The files pytest reads its settings from, and where in each (pytest.toml's table, and
# pyproject's `[tool.pytest]`, are pytest 9's; they hold lists where the ini forms hold text).
INI_SECTIONS = {
    "pytest.ini": "pytest",
    ".pytest.ini": "pytest",
    "tox.ini": "pytest",
    "setup.cfg": "tool:pytest",
}
TOML_FILES = frozenset({"pyproject.toml", "pytest.toml", ".pytest.toml"})
CONFIG_FILES = frozenset({*INI_SECTIONS, *TOML_FILES})
# pytest-django imports the settings module before any test runs.
DJANGO_SETTINGS_KEY = "django_settings_module"
PYTEST_ENTRY_POINTS = "pytest11"
DOCTEST_MODULES = "--doctest-modules"
# Doctest options that change how doctests run, not which files hold them.
DOCTEST_FLAGS = frozenset(
    {DOCTEST_MODULES, "--doctest-continue-on-failure", "--doctest-ignore-import-errors"}
)


class UnreadableSettings(ValueError):
    """A pytest setting that cannot be read, or that makes the selection unsound."""


@dataclass(frozen=True)
class PytestSettings:
    """What a repository's pytest config files say, together: test file patterns, whether
    doctests are collected, and the modules every test loads (plugins, a settings module)."""

    python_files: tuple[str, ...] = DEFAULT_PYTHON_FILES
    doctests: bool = False  # collected from files we cannot name (`--doctest-glob`)
    doctest_modules: bool = False  # every module pytest collects is a test module too
    plugins: tuple[str, ...] = ()

    def is_test_module(self, path: str) -> bool:
        """Does pytest take this file for a test module? (A pattern matches the file name.)"""
        name = PurePosixPath(path).name
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.python_files)


def is_config_file(path: str) -> bool:
    return PurePosixPath(path).name in CONFIG_FILES


def combined(found: Iterable[tuple[str, str]]) -> PytestSettings:
    """The settings of every (path, text) config file: any file's doctests or plugins count,
    and a test module is one any file's patterns take. UnreadableSettings when one cannot be
    read, or names test files by folder (a pattern with a `/`)."""
    patterns: list[str] = []
    doctests, modules, plugins = False, False, []
    for path, text in found:
        if "pytest" not in text:  # no pytest section or plugin: nothing here to read
            continue
        options, points = _pytest_options(path, text)
        args = _args(options.get("addopts", ""))
        modules = modules or DOCTEST_MODULES in args
        doctests = doctests or any("doctest" in a and a not in DOCTEST_FLAGS for a in args)
        plugins += [*_plugin_args(args), *points]
        if options.get(DJANGO_SETTINGS_KEY):
            plugins.append(str(options[DJANGO_SETTINGS_KEY]))
        if any("python_files" in arg for arg in args):
            raise UnreadableSettings(f"{path}: python_files overridden in addopts")
        if "python_files" in options:
            patterns += _words(options["python_files"])
    if any("/" in pattern for pattern in patterns):
        raise UnreadableSettings("python_files names a folder")
    return PytestSettings(
        python_files=tuple(dict.fromkeys(patterns)) or DEFAULT_PYTHON_FILES,
        doctests=doctests,
        doctest_modules=modules,
        plugins=tuple(dict.fromkeys(p.split(":")[0].strip() for p in plugins)),
    )


def _pytest_options(path: str, text: str) -> tuple[dict[str, object], list[str]]:
    """A file's pytest options (names lower-cased, as pytest's ini reader does not, but
    configparser does), and the modules it registers as pytest plugins."""
    name = PurePosixPath(path).name
    try:
        if name in TOML_FILES:
            return _toml_options(name, tomllib.loads(text))
        parser = configparser.RawConfigParser(strict=False)
        parser.read_string(text)
    except (tomllib.TOMLDecodeError, configparser.Error) as error:
        raise UnreadableSettings(f"{path}: {error}") from None
    section = INI_SECTIONS[name]
    options = dict(parser[section]) if parser.has_section(section) else {}
    points = ""
    if parser.has_section("options.entry_points"):
        points = parser["options.entry_points"].get(PYTEST_ENTRY_POINTS, "")
    return {k.lower(): v for k, v in options.items()}, _entry_points(points)


def _toml_options(name: str, doc: dict[str, object]) -> tuple[dict[str, object], list[str]]:
    tool = _table(doc.get("tool"))
    if name != "pyproject.toml":
        options = _table(doc.get("pytest"))
    else:
        pytest = _table(tool.get("pytest"))
        options = {**pytest, **_table(pytest.get("ini_options"))}
    points = _table(_table(_table(doc.get("project")).get("entry-points")).get(PYTEST_ENTRY_POINTS))
    return {k.lower(): v for k, v in options.items()}, [str(v) for v in points.values()]


def _table(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def _entry_points(text: str) -> list[str]:
    """`name = module:attr` lines of setup.cfg's entry point group."""
    return [line.partition("=")[2].strip() for line in text.splitlines() if "=" in line]


def _args(value: object) -> list[str]:
    try:
        if isinstance(value, list):
            return [arg for item in value for arg in shlex.split(str(item))]
        return shlex.split(str(value))
    except ValueError as error:  # an unclosed quote
        raise UnreadableSettings(f"addopts: {error}") from None


def _words(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else str(value).split()


def _plugin_args(args: list[str]) -> list[str]:
    """The modules `-p name` (or `-pname`) and pytest-django's `--ds=name` load."""
    found = []
    for i, arg in enumerate(args):
        if arg == "-p" and i + 1 < len(args):
            found.append(args[i + 1])
        elif arg.startswith("-p") and not arg.startswith("--"):
            found.append(arg[2:])
        elif arg == "--ds" and i + 1 < len(args):
            found.append(args[i + 1])
        elif arg.startswith("--ds="):
            found.append(arg.removeprefix("--ds="))
    return [name for name in found if not name.startswith("no:")]
