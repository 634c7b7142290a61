"""Which tests a story's check runs: the whole suite unless `checks: affected` and every
condition for running part of it holds (a real git repository for the import graph)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from worker.model.gates import GateResult, GateSpec, Runner, TestStatus
from worker.model.repo_config import RepoConfig, StoryChecks
from worker.model.state import AttemptOutcome, AttemptRecord, FrozenTests, StoryRecord
from worker.run.context import RunContext
from worker.run.story_scope import story_scope
from worker.verdict.test_side import TestSide

FILES = {
    "feature.py": "def value():\n    return 1\n",
    "tests/test_feature.py": "import feature\n\n\ndef test_value():\n    assert feature.value()\n",
    "tests/test_other.py": "def test_other():\n    pass\n",
}
OWN = "tests.test_new::test_new"
PYTEST = GateSpec(name="tests", command="python -m pytest -q")
BASELINE = [
    GateResult(
        name="tests",
        command="python -m pytest -q",
        passed=True,
        exit_code=0,
        timed_out=False,
        duration_s=1.0,
        tests={"tests.test_feature::test_value": TestStatus.PASSED},
    )
]


def record(story_id: str, *attempts: AttemptRecord) -> StoryRecord:
    return StoryRecord(
        id=story_id,
        title=story_id,
        acceptance_criteria=["done"],
        priority=int(story_id[-1]),
        attempts=list(attempts),
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "start"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True
        )
    return tmp_path


def context(repo: Path, stories: list[StoryRecord], **changes: Any) -> RunContext:
    values: dict[str, Any] = {
        "config": RepoConfig(checks=StoryChecks.AFFECTED),
        "gates": (PYTEST,),
        "gate_env": {"PATH": "/usr/bin"},
        "baseline": BASELINE,
        **changes,
    }
    return cast(
        RunContext,
        SimpleNamespace(
            cp=SimpleNamespace(stories=stories, baseline=values["baseline"]),
            config=values["config"],
            gates=values["gates"],
            gate_env=values["gate_env"],
            git=SimpleNamespace(path=repo),
            test_side=TestSide.of(None),
        ),
    )


FROZEN = FrozenTests(parent="p", commit="c", tests=[OWN])


def scope(repo: Path, stories: list[StoryRecord] | None = None, **changes: Any) -> Any:
    stories = stories if stories is not None else [record("US-1"), record("US-2")]
    return story_scope(context(repo, stories, **changes), stories[0], FROZEN, ["feature.py"])


def test_while_another_story_remains_its_check_runs_what_its_change_reaches(repo: Path) -> None:
    assert scope(repo) == [OWN, "tests/test_feature.py"]


@pytest.mark.parametrize(
    "changes",
    [
        {"config": RepoConfig()},  # checks: whole, the default
        {"baseline": [BASELINE[0].model_copy(update={"tests": None})]},  # no per-test results
        {"gates": (GateSpec(name="tests", command="npm test", runner=Runner.NODE),)},
        {"gates": (GateSpec(name="tests", command="python -m pytest --doctest-modules"),)},
        {"gate_env": {"PYTEST_ADDOPTS": "-p plugin"}},  # options the config files do not show
    ],
)
def test_the_whole_suite_when_part_of_it_cannot_be_judged_alone(
    repo: Path, changes: dict[str, Any]
) -> None:
    assert scope(repo, **changes) is None


def test_a_story_whose_tests_are_not_frozen_runs_the_whole_suite(repo: Path) -> None:
    stories = [record("US-1"), record("US-2")]
    assert story_scope(context(repo, stories), stories[0], None, ["feature.py"]) is None


def test_the_last_story_runs_the_whole_suite_unless_an_earlier_one_ran_part(repo: Path) -> None:
    # The only story left, nothing judged on part of the suite: its check is the final one.
    assert scope(repo, [record("US-1")]) is None
    partial = BASELINE[0].model_copy(update={"selected": ["tests/test_other.py"]})
    kept = AttemptRecord(
        iteration=1, attempt=1, outcome=AttemptOutcome.PASSED, commit="c1", gates=[partial]
    )
    done = record("US-0", kept)
    assert scope(repo, [record("US-1"), done]) == [
        "tests.test_new::test_new",
        "tests/test_feature.py",
    ]


def test_a_change_the_import_graph_cannot_follow_runs_the_whole_suite(repo: Path) -> None:
    stories = [record("US-1"), record("US-2")]
    ctx = context(repo, stories)
    assert story_scope(ctx, stories[0], FROZEN, ["data.json"]) is None
