"""reqdrive's pytest plugin: what pytest collected, what each test did, how the session ended.

Loaded by the worker from a read-only folder outside the repository (`-p reqdrive_results`),
it appends one JSON object a line to the file named by REQDRIVE_RESULTS: `start`,
`collected` (the ids kept for this run), `report` (one per setup/call/teardown phase),
`collect` (a file that failed or was skipped whole), `finish` (pytest's exit status). A call
phase's `report` says what the test function raised (`raised`), as seen from around it,
before any report is made of it: a report that says "passed" is then checked against it. With
REQDRIVE_ONLY naming a file of test ids (or of test files, as paths from pytest's rootdir:
every test in them), the other tests are deselected; with REQDRIVE_NARROW set too, pytest
does not even collect the files and folders that hold none of them (`Narrow`). Ids are written as
pytest's JUnit report names them ("classname::name"), the ids the worker keeps for every
test. It imports only the standard library and pytest: it runs in the gate's own
interpreter, whatever that has installed.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import IO, Any

import pytest

RESULTS_VAR = "REQDRIVE_RESULTS"
ONLY_VAR = "REQDRIVE_ONLY"
NARROW_VAR = "REQDRIVE_NARROW"
# Set while a session runs, so a pytest the tests start themselves (a subprocess inheriting
# the environment) knows it is not the gate's and records nothing.
SESSION_VAR = "REQDRIVE_RESULTS_SESSION"
LONGREPR_CHARS = 8000  # of one failure's text
# Collected ids per record: far below the 64 KiB a record may take (pytest_results.py).
IDS_PER_RECORD = 100

_stream: list[IO[str]] = []  # the results file, open for the session (the controller's only)
_only: list[set[str]] = []  # the ids to keep, when the worker names them
_prefix: list[str] = []  # the repository's --junit-prefix, which pytest's report puts first
_raised: dict[str, str] = {}  # nodeid: what its test function raised, seen around the call


def junit_id(nodeid: str) -> str:
    """The id pytest's JUnit report gives this node: its path as a dotted module, the
    classes, then the name with its parameters ("tests.test_x.TestA::test_b[1]")."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    classnames = [*_prefix, *names[:-1]]
    return ".".join(classnames) + "::" + names[-1] if classnames else names[-1]


def _write(record: dict[str, Any]) -> None:
    for stream in _stream:
        stream.write(json.dumps(record) + "\n")
        stream.flush()


def pytest_configure(config: pytest.Config) -> None:
    worker = hasattr(config, "workerinput")
    if os.environ.get(SESSION_VAR) and not worker:
        return  # started by a test of the gate's session: its tests are not the gate's
    prefix = getattr(config.option, "junitprefix", None)  # --junit-prefix
    if prefix and not _prefix:
        _prefix.append(str(prefix))
    only = os.environ.get(ONLY_VAR)
    if only and not _only:
        with open(only, encoding="utf-8") as listed:
            _only.append({line.strip() for line in listed if line.strip()})
    if _only and os.environ.get(NARROW_VAR):
        _narrow(config, _only[0])
    if worker:  # an xdist worker: its controller reports for it
        return
    os.environ[SESSION_VAR] = str(os.getpid())
    path = os.environ.get(RESULTS_VAR)
    if path and not _stream:
        _stream.append(open(path, "a", encoding="utf-8"))  # noqa: SIM115 (kept for the session)
    _write({"event": "start", "pid": os.getpid()})


@pytest.hookimpl(trylast=True)  # after -k and -m, on what they kept
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _only:
        return
    kept = [item for item in items if _asked(item.nodeid)]
    dropped = [item for item in items if not _asked(item.nodeid)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


class Narrow:
    """Collection pruned to the files holding the ids asked for: any other test file, and
    any folder on the way to none of them, is ignored before pytest reads it. Everything
    pytest itself would ignore is still ignored (its own hooks decide the rest), the command's
    paths and `testpaths` stay as they are (a file outside them is still not collected), and
    the deselection by id still runs on what is collected. A package's `__init__.py` is never
    ignored: it decides the modules' names."""

    def __init__(self, files: set[Path]) -> None:
        self.files = files
        self.folders = {folder for path in files for folder in path.parents}

    @pytest.hookimpl(tryfirst=True)
    def pytest_ignore_collect(self, collection_path: Path) -> bool | None:
        path = Path(os.path.abspath(collection_path))
        if path in self.files or path in self.folders or path.name == "__init__.py":
            return None  # pytest's own rules decide
        return True


def _narrow(config: pytest.Config, asked: set[str]) -> None:
    """Prune collection to the files the ids asked for lie in, where every id names a file
    that exists (a path, or a dotted module from its JUnit id) and pytest calls the hook with
    `collection_path` (7.0 and later); otherwise the deselection alone selects."""
    version = tuple(int(p) for p in re.findall(r"\d+", pytest.__version__)[:1])
    if version < (7,) or _prefix:
        return
    root = Path(os.path.abspath(config.rootpath))
    files = set()
    for test_id in asked:
        found = _file_of(root, test_id.partition("::")[0])
        if found is None:
            return
        files.add(found)
    if files:
        config.pluginmanager.register(Narrow(files), "reqdrive_narrow")


def _file_of(root: Path, name: str) -> Path | None:
    """The test file a path ("tests/test_x.py") or a JUnit classname ("tests.test_x.TestA",
    "tests.test_x") names under pytest's rootdir: the longest dotted prefix that is a file."""
    if name.endswith(".py"):
        path = root / name
        return path if path.is_file() else None
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        path = root.joinpath(*parts[:cut]).with_suffix(".py")
        if path.is_file():
            return path
    return None


def _asked(nodeid: str) -> bool:
    return junit_id(nodeid) in _only[0] or nodeid.partition("::")[0] in _only[0]


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if not hasattr(config, "workerinput") and not config.pluginmanager.hasplugin("dsession"):
        _write_collected([junit_id(item.nodeid) for item in session.items], {})


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's: the controller collects nothing itself
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    _write_collected([junit_id(nodeid) for nodeid in ids], {"node": True})


def _write_collected(ids: list[str], extra: dict[str, object]) -> None:
    """The collected ids, IDS_PER_RECORD to a record: the worker reads a record up to a
    bounded length, and a real suite's ids (parametrized, 1,000 and more) pass it in one."""
    for start in range(0, len(ids), IDS_PER_RECORD):
        _write({"event": "collected", "ids": ids[start : start + IDS_PER_RECORD], **extra})
    if not ids:
        _write({"event": "collected", "ids": [], **extra})


# The innermost wrapper this plugin can be: the test function's own exception, before
# pytest or any plugin makes a report of it (code that patches the reports changes them
# after this). A skip or an xfail raised on purpose is no failure.
@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    outcome = yield
    excinfo = outcome.excinfo
    if excinfo is not None and not isinstance(
        excinfo[1], (pytest.skip.Exception, pytest.xfail.Exception)
    ):
        _raised[item.nodeid] = type(excinfo[1]).__name__


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if not report.passed:  # a file that failed to import, or skipped itself whole
        _write({"event": "collect", "id": junit_id(report.nodeid), "outcome": report.outcome})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    record = {
        "event": "report",
        "id": junit_id(report.nodeid),
        "when": report.when,
        "outcome": report.outcome,
        "xfail": hasattr(report, "wasxfail"),
    }
    if report.when == "call":
        record["raised"] = _raised.pop(report.nodeid, None)
    if report.failed:
        record["longrepr"] = report.longreprtext[-LONGREPR_CHARS:]
    _write(record)


def pytest_sessionfinish(exitstatus: int) -> None:
    _write({"event": "finish", "exitstatus": int(exitstatus)})


def pytest_unconfigure() -> None:
    if _stream:  # the gate's own session ends: a next one in this process is the gate's too
        os.environ.pop(SESSION_VAR, None)
    while _stream:
        _stream.pop().close()
