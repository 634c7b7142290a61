"""A fail-to-pass proof collects only the story's test files (`narrow`), never more than the
whole run would: the command's paths, testpaths and pytest's own ignore rules still hold."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.pytest_command import PLAIN_PYTEST
from worker.confine.redact import Redactor
from worker.model.gates import GateResult, GateSpec, TestStatus
from worker.verdict.gates import run_gate

PYTHON_BIN = str(Path(sys.executable).parent)
ENV = {"PATH": f"{PYTHON_BIN}:{os.environ['PATH']}", "LANG": "C.UTF-8"}
PYTEST = PLAIN_PYTEST
# A module that says it was imported: collecting it imports it.
SEEN = "import pathlib\npathlib.Path(__file__).with_suffix('.seen').touch()\n\n"


def run(repo: Path, command: str, only: list[str], *, narrow: bool) -> GateResult:
    home = repo.parent / "home"
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    return run_gate(
        GateSpec(name="tests", command=command),
        cwd=repo,
        env={**ENV, "HOME": str(home), "TMPDIR": str(home / "tmp")},
        output_dir=repo.parent / "out",
        label="iteration-1-tests",
        redactor=Redactor(),
        only=only,
        narrow=narrow,
    )


def seen(repo: Path) -> Iterator[str]:
    for mark in repo.rglob("*.seen"):
        mark.unlink()  # read once: the next run starts with none
        yield str(mark.relative_to(repo).with_suffix(".py"))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    for package in ("tests", "tests/unit", "tests/other"):
        (folder / package).mkdir(parents=True)
        (folder / package / "__init__.py").write_text("")
    (folder / "conftest.py").write_text(SEEN)
    (folder / "tests" / "unit" / "conftest.py").write_text(SEEN)
    (folder / "tests" / "other" / "conftest.py").write_text(SEEN)
    (folder / "tests" / "unit" / "test_old.py").write_text(SEEN + "def test_old():\n    pass\n")
    (folder / "tests" / "other" / "test_far.py").write_text(SEEN + "def test_far():\n    pass\n")
    (folder / "tests" / "unit" / "test_new.py").write_text(
        SEEN + "from . import helper_free\n\ndef test_new():\n    assert helper_free.X == 2\n"
    )
    (folder / "tests" / "unit" / "helper_free.py").write_text("X = 1\n")
    return folder


def test_the_proof_collects_only_the_story_s_files(repo: Path) -> None:
    only = ["tests/unit/test_new.py"]
    whole = run(repo, PYTEST, only, narrow=False)
    assert whole.tests == {"tests.unit.test_new::test_new": TestStatus.FAILED}
    assert sorted(seen(repo)) == [
        "conftest.py",
        "tests/other/conftest.py",
        "tests/other/test_far.py",
        "tests/unit/conftest.py",
        "tests/unit/test_new.py",
        "tests/unit/test_old.py",
    ]
    narrow = run(repo, PYTEST, only, narrow=True)
    # The same result, as a module of its package (its relative import works), and the
    # conftests on its way; nothing else was even imported.
    assert narrow.tests == whole.tests and narrow.disagreements == []
    assert narrow.selected == only
    assert sorted(seen(repo)) == ["conftest.py", "tests/unit/conftest.py", "tests/unit/test_new.py"]


def test_ids_name_their_files_too(repo: Path) -> None:
    # As the parent proof of `tests: together` asks: test ids and dotted modules.
    only = ["tests.unit.test_new::test_new", "tests.unit.test_new"]
    narrow = run(repo, PYTEST, only, narrow=True)
    assert narrow.tests == {"tests.unit.test_new::test_new": TestStatus.FAILED}
    assert "tests/other/test_far.py" not in list(seen(repo))


def test_an_id_naming_no_file_collects_everything_as_before(repo: Path) -> None:
    narrow = run(repo, PYTEST, ["tests/unit/test_new.py", "tests.gone::test_x"], narrow=True)
    assert narrow.tests == {"tests.unit.test_new::test_new": TestStatus.FAILED}
    assert "tests/other/test_far.py" in list(seen(repo))


@pytest.mark.parametrize(
    ("command", "config"),
    [
        (f"{PYTEST} tests/other", ""),  # the command's own path leaves the file out
        (PYTEST, "[pytest]\ntestpaths = tests/other\n"),
        (PYTEST, "[pytest]\npython_files = check_*.py\n"),
        (PYTEST, "[pytest]\nnorecursedirs = unit\n"),
        (f"{PYTEST} --ignore=tests/unit/test_new.py", ""),
    ],
)
def test_a_file_the_whole_run_would_not_collect_is_not_collected(
    repo: Path, command: str, config: str
) -> None:
    if config:
        (repo / "pytest.ini").write_text(config)
    only = ["tests/unit/test_new.py"]
    assert run(repo, command, only, narrow=False).tests == {}
    assert run(repo, command, only, narrow=True).tests == {}


def test_a_command_naming_the_file_s_folder_still_narrows(repo: Path) -> None:
    only = ["tests/unit/test_new.py"]
    narrow = run(repo, f"{PYTEST} tests", only, narrow=True)
    assert narrow.tests == {"tests.unit.test_new::test_new": TestStatus.FAILED}
    assert "tests/other/test_far.py" not in list(seen(repo))
