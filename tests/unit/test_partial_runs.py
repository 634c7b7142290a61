"""Checks on part of the suite (`checks: affected`): what they are held against, what the run
knows after them, the rule for tests no check ran on a story's parent, and the bisection."""

from __future__ import annotations

from collections.abc import Sequence

from worker.model.gates import GateResult, TestStatus
from worker.model.state import AttemptOutcome, AttemptRecord, StoryRecord, StoryState
from worker.run.end_bisect import first_failing
from worker.verdict.flaky import Rerun, Reruns, judge_reruns
from worker.verdict.judging import reference_gates, unseen_before
from worker.verdict.partial_runs import in_scope, overlay, unseen_at_head, within
from worker.verdict.readiness import vanished

P, F = TestStatus.PASSED, TestStatus.FAILED


def gate(
    tests: dict[str, TestStatus], *, selected: list[str] | None = None, name: str = "tests"
) -> GateResult:
    failed = F in tests.values()
    return GateResult(
        name=name,
        command="pytest",
        passed=not failed,
        exit_code=1 if failed else 0,
        timed_out=False,
        duration_s=1.0,
        tests=tests,
        failures={t: "boom" for t, s in tests.items() if s is F},
        selected=selected,
    )


def story(story_id: str, *attempts: tuple[int, list[GateResult]]) -> StoryRecord:
    return StoryRecord(
        id=story_id,
        title=story_id,
        description="",
        acceptance_criteria=["done"],
        priority=1,
        state=StoryState.PASSED,
        attempts=[
            AttemptRecord(
                iteration=i, attempt=1, outcome=AttemptOutcome.PASSED, gates=g, commit=f"c{i}"
            )
            for i, g in attempts
        ],
    )


BASELINE = [gate({"a.py::t1": P, "a.py::t2": F, "b.py::t3": P})]


def test_a_check_on_some_files_is_held_against_those_files_alone() -> None:
    [held] = within(BASELINE, ["b.py"])
    assert held.tests == {"b.py::t3": P}
    assert held.passed  # a.py's failure is not in the files it ran
    assert held.failures == {}
    [held] = within(BASELINE, ["a.py"])
    assert held.tests == {"a.py::t1": P, "a.py::t2": F}
    assert not held.passed and held.failures == {"a.py::t2": "boom"}


def test_a_file_holds_its_classes_tests_not_those_of_a_folder_named_like_it() -> None:
    scope = ["tests/test_a.py"]
    assert in_scope("tests.test_a::t", scope)
    assert in_scope("tests.test_a.TestB::t", scope)
    assert in_scope("tests.test_a.TestB.TestC::t", scope)
    assert not in_scope("tests.test_a.test_c::t", scope)  # tests/test_a/test_c.py
    assert not in_scope("tests.test_a.sub.test_d::t", scope)
    assert not in_scope("tests.test_ab::t", scope)


def test_a_partial_check_updates_the_tests_it_ran_and_keeps_the_rest() -> None:
    later = [gate({"a.py::t2": P, "c.py::t4": P}, selected=["a.py", "c.py"])]
    [known] = overlay(BASELINE, later)
    assert known.tests == {"a.py::t1": P, "a.py::t2": P, "b.py::t3": P, "c.py::t4": P}
    assert known.passed and known.failures == {}
    # A whole check replaces what was known: a test it no longer reports is gone.
    [replaced] = overlay(BASELINE, [gate({"a.py::t1": P})])
    assert replaced.tests == {"a.py::t1": P}


def test_a_gate_red_without_a_failing_test_stays_red_when_a_partial_check_updates_it() -> None:
    red = BASELINE[0].model_copy(update={"tests": {"a.py::t1": P}, "passed": False})
    [known] = overlay([red], [gate({"a.py::t1": P}, selected=["a.py"])])
    assert not known.passed


def test_the_reference_after_partial_checks_is_the_last_whole_one_with_each_laid_over() -> None:
    stories = [
        story("US-001", (1, [gate({"a.py::t1": P, "a.py::t2": P}, selected=["a.py"])])),
        story("US-002", (2, [gate({"d.py::t5": P}, selected=["d.py"])])),
    ]
    [known] = reference_gates(stories, BASELINE)
    assert known.tests == {"a.py::t1": P, "a.py::t2": P, "b.py::t3": P, "d.py::t5": P}
    # b.py ran at the base, not on the head's check: unseen by the head's parent.
    assert unseen_before(stories, reference_gates(stories, BASELINE)) == {
        "a.py::t1",
        "a.py::t2",
        "b.py::t3",
    }
    # A whole check on top makes every test seen again, and is the reference itself.
    whole = [gate({"a.py::t1": P, "b.py::t3": F})]
    stories.append(story("US-003", (3, whole)))
    assert reference_gates(stories, BASELINE) == whole
    assert unseen_before(stories, reference_gates(stories, BASELINE)) == set()


def test_no_test_is_unseen_when_the_head_was_made_by_a_whole_check_or_the_baseline() -> None:
    assert unseen_at_head(BASELINE, None) == set()
    assert unseen_at_head(BASELINE, BASELINE) == set()
    assert unseen_at_head(BASELINE, [gate({"b.py::t3": P}, selected=["b.py"])]) == {
        "a.py::t1",
        "a.py::t2",
    }


def test_an_unseen_test_failing_on_the_parent_every_time_was_broken_before_the_story() -> None:
    reruns = Reruns(story={"t": ["failed", "failed"]}, parent={"t": ["failed", "failed"]})
    assert judge_reruns(["t"], reruns, unseen={"t"})["t"].rerun is Rerun.BEFORE
    # Seen on the parent (it passed there in a check), failing there alone every time is no
    # chance (it depends on the tests run before it): not flaky, the story broke it.
    assert judge_reruns(["t"], reruns)["t"].rerun is Rerun.BROKEN
    # Unseen, but passing on the parent when run again: the story broke it.
    passing = Reruns(story={"t": ["failed", "failed"]}, parent={"t": ["passed", "passed"]})
    assert judge_reruns(["t"], passing, unseen={"t"})["t"].rerun is Rerun.BROKEN
    # Unseen and flipping on the parent: flaky.
    flipping = Reruns(story={"t": ["failed", "failed"]}, parent={"t": ["passed", "failed"]})
    assert judge_reruns(["t"], flipping, unseen={"t"})["t"].rerun is Rerun.FLAKY


def test_the_bisection_finds_each_tests_first_failing_commit_in_few_runs() -> None:
    broke_at = {"x": 1, "y": 1, "z": 6}
    asked: list[tuple[int, tuple[str, ...]]] = []

    def failing_at(index: int, tests: Sequence[str]) -> set[str]:
        asked.append((index, tuple(tests)))
        return {t for t in tests if broke_at[t] <= index}

    assert first_failing(["x", "y", "z"], 0, 7, failing_at) == broke_at
    # log2(8) = 3 runs per group of tests that broke at one commit, the split run shared.
    assert len(asked) <= 6
    assert first_failing([], 0, 7, failing_at) == {}
    assert first_failing(["x"], 3, 3, failing_at) == {"x": 3}


def test_tests_that_passed_before_and_are_gone_or_skipped_at_the_head_are_named() -> None:
    s = TestStatus.SKIPPED
    stories = [
        story("US-001", (1, [gate({"c.py::t4": P}, selected=["c.py"])])),
        story("US-002", (2, [gate({"d.py::t5": P}, selected=["d.py"])])),
    ]
    head = [gate({"a.py::t1": P, "a.py::t2": F, "c.py::t4": s, "d.py::t5": P})]
    # b.py::t3 passed at the baseline and is gone; c.py::t4 passed in US-001's check and is
    # skipped; a.py::t2 failed before and is no business of this rule.
    assert vanished(stories, BASELINE, head) == ["b.py::t3", "c.py::t4"]
    # Every story judged on the whole suite: each check already held it.
    whole = [story("US-001", (1, [gate({"a.py::t1": P, "c.py::t4": P})]))]
    assert vanished(whole, BASELINE, head) == []
    # No per-test results at the head: judged as such, not as every test gone.
    assert vanished(stories, BASELINE, [head[0].model_copy(update={"tests": None})]) == []
