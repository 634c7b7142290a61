"""What a story changed in its tests and in what the gates run, read from real git commits."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.integration.test_pipeline import MakeProject, project_factory
from tests.integration.test_pipeline_judging import (
    calc_prd,
    calc_project,
    op,
    pr_body,
    run,
)
from worker.model.gates import GateSpec
from worker.model.state import AttemptOutcome, StoryState
from worker.verdict.tampering import changed_files, files_with_tests, gate_inputs, rewritten_tests

PYPROJECT = (
    '[project]\nname = "x"\ndependencies = []\n\n[tool.pytest.ini_options]\naddopts = "-q"\n'
)
TESTS = "def test_one():\n    assert 1 == 1\n\n\ndef test_two():\n    assert 2 == 2\n"


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def commit(repo: Path, files: dict[str, str | None]) -> str:
    for name, text in files.items():
        path = repo / name
        if text is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "change")
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "config", "user.email", "t@example.com")
    git(tmp_path, "config", "user.name", "t")
    commit(tmp_path, {"pyproject.toml": PYPROJECT, "tests/test_x.py": TESTS, "run.sh": "pytest\n"})
    return tmp_path


GATES = [GateSpec(name="tests", command="bash ./run.sh"), GateSpec(name="lint", command="make")]


@pytest.mark.parametrize(
    ("files", "named"),
    [
        ({"run.sh": "exit 0\n"}, ["run.sh"]),  # the gate's own script
        ({"Makefile": "all:\n\ttrue\n"}, ["Makefile"]),  # what `make` reads
        ({"tests/conftest.py": "collect_ignore = ['test_x.py']\n"}, ["tests/conftest.py"]),
        ({"pytest.ini": "[pytest]\n"}, ["pytest.ini"]),
        ({"pyproject.toml": PYPROJECT.replace('"-q"', '"-q -k one"')}, ["pyproject.toml"]),
        # A dependency added is not a change to what the tests run.
        ({"pyproject.toml": PYPROJECT.replace("[]", '["rich"]')}, []),
        ({"src.py": "x = 1\n"}, []),
    ],
)
def test_changes_to_what_a_gate_runs_are_named(
    repo: Path, files: dict[str, str | None], named: list[str]
) -> None:
    pre = git(repo, "rev-parse", "HEAD")
    after = commit(repo, files)
    assert gate_inputs(repo, pre, after, changed_files(repo, pre, after), GATES) == named


def test_a_rewritten_test_is_told_from_a_test_added_beside_it(repo: Path) -> None:
    pre = git(repo, "rev-parse", "HEAD")
    added = TESTS + "\n\ndef test_three():\n    assert 3 == 3\n"
    after = commit(repo, {"tests/test_x.py": "# moved down\n\n" + added})
    ids = ["tests.test_x::test_one", "tests.test_x::test_two"]
    assert rewritten_tests(repo, pre, after, changed_files(repo, pre, after), ids) == []

    weakened = added.replace("assert 2 == 2", "assert True")
    skipped = "import pytest\n\n\n@pytest.mark.skip\n" + weakened
    later = commit(repo, {"tests/test_x.py": skipped})
    changed = changed_files(repo, after, later)
    assert rewritten_tests(repo, after, later, changed, ids) == ids  # skipped, and weakened
    gone = commit(repo, {"tests/test_x.py": None})
    # A deleted test is not "rewritten": its missing result says what happened.
    assert rewritten_tests(repo, later, gone, changed_files(repo, later, gone), ids) == []


def test_test_files_are_found_by_convention_and_by_the_ids_they_hold() -> None:
    changed = ["calc.py", "tests/test_calc.py", "web/app.test.js", "pkg/add_test.go", "checks.py"]
    assert files_with_tests(changed, ["checks::test_x"]) == [
        "tests/test_calc.py",
        "web/app.test.js",
        "pkg/add_test.go",
        "checks.py",
    ]


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def test_a_story_that_passes_only_with_its_gate_script_replaced_needs_review(
    make_project: MakeProject,
) -> None:
    # A check with no per-test results (a shell script): replaced with `exit 0` it is green.
    check = "set -e\nfor f in add sub mul; do grep -q 'return' $f.py; done\n"
    project = calc_project(
        make_project,
        config={"testCommand": "bash tests/check.sh", "gates": []},
        files={"tests/check.sh": check, "tests/test_calc.py": None},
    )
    result = run(
        project,
        {
            "plan": [{"prd": calc_prd(add=[], sub=[], mul=[])}],
            "stories": {
                "US-001": [
                    {**op("add"), "write": {**op("add")["write"], "tests/check.sh": "exit 0\n"}}
                ],
                "US-002": [op("sub")],
                "US-003": [op("mul")],
            },
        },
    )

    first = result.stories[0]
    assert first.state is StoryState.NEEDS_REVIEW
    attempt = first.attempts[0]
    assert attempt.outcome is AttemptOutcome.NEEDS_REVIEW
    assert attempt.gate_changes == ["tests/check.sh"]
    assert attempt.reason.startswith(
        "passes only with its change to what a gate runs (tests/check.sh)"
    )
    assert first.commit is not None  # kept for a person to judge, never retried
    assert len(first.attempts) == 1
    assert not result.ready
    body = pr_body(project)
    assert "1 needs review" in body
    assert "- attempt 1 changed what a gate runs: `tests/check.sh`" in body
    assert "**No per-test results**" in body
