"""One decision per attempt: its tests, the proof its new tests give, and its gate changes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from worker.model.feedback import AddedBy
from worker.model.gates import GateResult, TestStatus
from worker.model.state import AttemptOutcome
from worker.verdict.flaky import Reruns
from worker.verdict.story_verdict import Evidence, decide, decide_unchanged

PASSED, FAILED = TestStatus.PASSED, TestStatus.FAILED


def gate(**tests: TestStatus) -> GateResult:
    return GateResult(
        name="tests",
        command="pytest",
        passed=FAILED not in tests.values(),
        exit_code=int(FAILED in tests.values()),
        timed_out=False,
        duration_s=0.1,
        tests=dict(tests),
    )


BEFORE = [gate(old=PASSED, wanted=FAILED)]


def never_rerun(test_ids: Sequence[str]) -> Reruns:
    raise AssertionError(f"{test_ids} were run again alone without need")


def never_at_parent() -> Mapping[str, str]:
    raise AssertionError("the added tests were run on the parent without need")


def never_as_they_were() -> Sequence[GateResult]:
    raise AssertionError("the gates were run as they were without need")


def evidence(
    results: list[GateResult], *, added: Sequence[str] = (), gate_changes: Sequence[str] = ()
) -> Evidence:
    """The story owns `wanted` (failing before) and the tests it added."""
    return Evidence(
        BEFORE,
        results,
        ["tests"],
        owned={"wanted", *added},
        added=added,
        gate_changes=gate_changes,
    )


def test_a_story_that_makes_its_test_pass_passes_without_running_anything_more() -> None:
    verdict = decide(
        evidence([gate(old=PASSED, wanted=PASSED)]),
        rerun_alone=never_rerun,
        added_at_parent=never_at_parent,
        gates_as_they_were=never_as_they_were,
    )
    assert verdict.outcome is AttemptOutcome.PASSED
    assert [(c.id, c.after, c.problem) for c in verdict.tests] == [
        ("old", "passed", ""),
        ("wanted", "passed", ""),
    ]


def test_an_added_test_that_passes_on_the_parent_too_fails_the_story() -> None:
    verdict = decide(
        evidence([gate(old=PASSED, wanted=PASSED, new=PASSED)], added=["new"]),
        rerun_alone=never_rerun,
        added_at_parent=lambda: {"new": "passed"},
        gates_as_they_were=never_as_they_were,
    )
    assert verdict.outcome is AttemptOutcome.GATES_FAILED
    assert verdict.reason == "new passes without the story's change too, so it proves nothing"


def test_a_pass_that_rests_on_a_changed_gate_needs_review() -> None:
    verdict = decide(
        evidence(
            [gate(old=PASSED, wanted=PASSED, new=PASSED)],
            added=["new"],
            gate_changes=["conftest.py"],
        ),
        rerun_alone=never_rerun,
        added_at_parent=lambda: {"new": "failed"},
        gates_as_they_were=lambda: [gate(old=PASSED, wanted=FAILED, new=PASSED)],
    )
    assert verdict.outcome is AttemptOutcome.NEEDS_REVIEW
    assert verdict.reason == (
        "passes only with its change to what a gate runs (conftest.py); "
        "with the gates as they were: wanted still fails"
    )


def test_a_pass_that_holds_with_the_gates_as_they_were_stays_a_pass() -> None:
    verdict = decide(
        evidence([gate(old=PASSED, wanted=PASSED)], gate_changes=["Makefile"]),
        rerun_alone=never_rerun,
        added_at_parent=never_at_parent,
        gates_as_they_were=lambda: [gate(old=PASSED, wanted=PASSED)],
    )
    assert (verdict.outcome, verdict.reason) == (AttemptOutcome.PASSED, "")


class RerunGiving:
    """Re-runs alone in which every test asked for gives these statuses on each side."""

    def __init__(self, story: list[str], parent: list[str]) -> None:
        self.story, self.parent = story, parent
        self.asked: list[str] = []

    def __call__(self, test_ids: Sequence[str]) -> Reruns:
        self.asked.extend(test_ids)
        return Reruns(
            story={t: self.story for t in test_ids}, parent={t: self.parent for t in test_ids}
        )


def test_a_failure_names_its_gate_change_and_runs_no_gate_again() -> None:
    verdict = decide(
        evidence([gate(old=FAILED, wanted=PASSED)], gate_changes=["conftest.py"]),
        rerun_alone=RerunGiving(["failed", "failed"], ["passed", "passed"]),
        added_at_parent=never_at_parent,
        gates_as_they_were=never_as_they_were,
    )
    assert verdict.outcome is AttemptOutcome.GATES_FAILED
    assert verdict.reason == (
        "old fails now; it passed before the story (the same when run again alone); "
        "it changed what a gate runs: conftest.py"
    )


def test_results_the_collectors_disagree_on_need_review_never_pass() -> None:
    green = gate(old=PASSED, wanted=PASSED).model_copy(
        update={"disagreements": ["the command exited 0, though tests failed: wanted"]}
    )
    verdict = decide(
        evidence([green]),
        rerun_alone=never_rerun,
        added_at_parent=never_at_parent,
        gates_as_they_were=never_as_they_were,
    )
    assert verdict.outcome is AttemptOutcome.NEEDS_REVIEW
    assert verdict.reason == (
        "the worker's results disagree: gate tests: the command exited 0, though tests "
        "failed: wanted"
    )


def test_a_failing_attempt_stays_failed_and_says_its_results_disagree_too() -> None:
    red = gate(old=PASSED, wanted=FAILED).model_copy(update={"disagreements": ["odd"]})
    verdict = decide(
        evidence([red]),
        rerun_alone=never_rerun,
        added_at_parent=never_at_parent,
        gates_as_they_were=never_as_they_were,
    )
    assert verdict.outcome is AttemptOutcome.GATES_FAILED
    assert verdict.reason == "wanted still fails; the worker's results disagree: gate tests: odd"


def test_a_green_test_gate_without_per_test_results_is_unverified_with_the_config_line() -> None:
    hint = "gate tests (`npm test`) gives no per-test results; for jest, set `testCommand: ...`"
    blind = GateResult(
        name="tests",
        command="npm test",
        passed=True,
        exit_code=0,
        timed_out=False,
        duration_s=0.1,
        no_results=hint,
    )
    before = blind.model_copy(update={"passed": False, "exit_code": 1})
    verdict = decide(
        Evidence([before], [blind], ["tests"]),
        rerun_alone=never_rerun,
        added_at_parent=never_at_parent,
        gates_as_they_were=never_as_they_were,
    )
    assert verdict.outcome is AttemptOutcome.UNVERIFIED
    assert verdict.reason == hint


def test_a_test_that_passed_before_and_flips_without_the_change_is_flaky_and_kept_out() -> None:
    rerun = RerunGiving(["passed", "failed"], ["passed", "failed"])
    verdict = decide(
        evidence([gate(old=FAILED, wanted=PASSED)]),
        rerun_alone=rerun,
        added_at_parent=never_at_parent,
        gates_as_they_were=never_as_they_were,
    )
    assert rerun.asked == ["old"]
    assert (verdict.outcome, verdict.reason) == (AttemptOutcome.PASSED, "")
    old = next(c for c in verdict.tests if c.id == "old")
    assert (old.flaky, old.problem) == (True, "")
    assert old.reruns == (
        "with the story: failed, passed, failed; without it: passed, passed, failed"
    )


def test_a_test_that_fails_every_time_with_the_story_counts_against_it() -> None:
    verdict = decide(
        evidence([gate(old=FAILED, wanted=PASSED)]),
        rerun_alone=RerunGiving(["failed", "failed"], ["passed", "passed"]),
        added_at_parent=never_at_parent,
        gates_as_they_were=never_as_they_were,
    )
    assert verdict.outcome is AttemptOutcome.GATES_FAILED
    assert (
        verdict.reason
        == "old fails now; it passed before the story (the same when run again alone)"
    )
    assert not next(c for c in verdict.tests if c.id == "old").flaky


def test_a_test_that_flips_only_with_the_story_counts_against_it() -> None:
    # The story's own code runs on its side: a test it broke could be made to fail only every
    # other time there. Flakiness has to show where its change is not.
    verdict = decide(
        evidence([gate(old=FAILED, wanted=PASSED)]),
        rerun_alone=RerunGiving(["passed", "failed"], ["passed", "passed"]),
        added_at_parent=never_at_parent,
        gates_as_they_were=never_as_they_were,
    )
    assert verdict.outcome is AttemptOutcome.GATES_FAILED
    assert verdict.reason == (
        "old fails now; it passed before the story, and flips only with the story's change"
    )


def test_nothing_is_run_again_when_another_failure_fails_the_story_anyway() -> None:
    verdict = decide(
        evidence([gate(old=FAILED, wanted=FAILED)]),
        rerun_alone=never_rerun,
        added_at_parent=never_at_parent,
        gates_as_they_were=never_as_they_were,
    )
    assert verdict.outcome is AttemptOutcome.GATES_FAILED
    assert verdict.reason == "old fails now; it passed before the story; wanted still fails"


def test_a_test_the_story_owns_is_never_excused_as_flaky() -> None:
    # SWE-bench's fail-to-pass tests must pass: a story's own test failing is never re-run
    # into a pass, even one that passed before it (a plan's claim of a passing test).
    owns_passing = Evidence(
        [gate(old=PASSED, wanted=PASSED)],
        [gate(old=PASSED, wanted=FAILED)],
        ["tests"],
        owned={"wanted"},
    )
    verdict = decide(
        owns_passing,
        rerun_alone=never_rerun,
        added_at_parent=never_at_parent,
        gates_as_they_were=never_as_they_were,
    )
    assert verdict.outcome is AttemptOutcome.GATES_FAILED
    assert verdict.reason == "wanted fails now; it passed before the story"


def test_an_added_test_that_fails_when_run_as_on_its_parent_needs_review() -> None:
    asked: list[Sequence[str]] = []

    def alike(test_ids: Sequence[str]) -> Mapping[str, str]:
        asked.append(test_ids)
        return {"new": "failed"}

    verdict = decide(
        evidence([gate(old=PASSED, wanted=PASSED, new=PASSED)], added=["new"]),
        rerun_alone=never_rerun,
        added_at_parent=lambda: {"new": "failed"},
        gates_as_they_were=never_as_they_were,
        alike_at_head=alike,
    )
    assert asked == [["new"]]
    assert verdict.outcome is AttemptOutcome.NEEDS_REVIEW
    assert verdict.reason.startswith("new passes in the whole suite's run but is failed when")
    assert verdict.reason.endswith("its result depends on which tests run with it")
    new = next(c for c in verdict.tests if c.id == "new")
    assert new.problem == verdict.reason


def test_an_added_test_that_passes_in_both_runs_or_had_a_whole_proof_stays_a_pass() -> None:
    found: list[Mapping[str, str] | None] = [{"new": "passed"}, None]
    for alike in found:

        def as_on_parent(
            _ids: Sequence[str], alike: Mapping[str, str] | None = alike
        ) -> Mapping[str, str] | None:
            return alike

        verdict = decide(
            evidence([gate(old=PASSED, wanted=PASSED, new=PASSED)], added=["new"]),
            rerun_alone=never_rerun,
            added_at_parent=lambda: {"new": "failed"},
            gates_as_they_were=never_as_they_were,
            alike_at_head=as_on_parent,
        )
        assert verdict.outcome is AttemptOutcome.PASSED, verdict.reason


def test_a_failing_story_does_not_run_its_tests_again_as_on_its_parent() -> None:
    def never_alike(test_ids: Sequence[str]) -> Mapping[str, str]:
        raise AssertionError(f"{test_ids} were run as on the parent without need")

    verdict = decide(
        evidence([gate(old=PASSED, wanted=FAILED, new=PASSED)], added=["new"]),
        rerun_alone=never_rerun,
        added_at_parent=never_at_parent,
        gates_as_they_were=never_as_they_were,
        alike_at_head=never_alike,
    )
    assert verdict.outcome is AttemptOutcome.GATES_FAILED


def added_later(
    results: list[GateResult], by: AddedBy, *, owned: Sequence[str] = (), added: Sequence[str] = ()
) -> Evidence:
    """A story added after the plan: it owns `owned` (CI's failing tests it reproduced) and
    the tests it added; nothing when it brought no test."""
    return Evidence(BEFORE, results, ["tests"], owned={*owned, *added}, added=added, added_by=by)


def test_a_feedback_story_passing_on_pass_to_pass_alone_needs_review_never_passes() -> None:
    verdict = decide(
        added_later([gate(old=PASSED, wanted=FAILED)], AddedBy.REVIEW),
        rerun_alone=never_rerun,
        added_at_parent=never_at_parent,
        gates_as_they_were=never_as_they_were,
    )
    assert verdict.outcome is AttemptOutcome.NEEDS_REVIEW
    assert verdict.reason.startswith(
        "no test of its own shows the review comment addressed (none failed without its "
        "change and passes with it): a person reads the change"
    )


def test_a_ci_fix_story_with_no_reproduced_test_needs_review_and_ci_decides() -> None:
    verdict = decide(
        added_later([gate(old=PASSED, wanted=FAILED)], AddedBy.CI),
        rerun_alone=never_rerun,
        added_at_parent=never_at_parent,
        gates_as_they_were=never_as_they_were,
    )
    assert verdict.outcome is AttemptOutcome.NEEDS_REVIEW
    assert "no test the worker ran showed the CI failure fixed" in verdict.reason
    assert verdict.reason.endswith("the next CI result decides")


def test_a_story_added_later_with_a_proven_fail_to_pass_test_still_passes() -> None:
    with_test = decide(
        added_later([gate(old=PASSED, wanted=FAILED, new=PASSED)], AddedBy.REVIEW, added=["new"]),
        rerun_alone=never_rerun,
        added_at_parent=lambda: {"new": "failed"},
        gates_as_they_were=never_as_they_were,
    )
    reproduced = decide(
        added_later([gate(old=PASSED, wanted=PASSED)], AddedBy.CI, owned=["wanted"]),
        rerun_alone=never_rerun,
        added_at_parent=never_at_parent,
        gates_as_they_were=never_as_they_were,
    )
    assert (with_test.outcome, with_test.reason) == (AttemptOutcome.PASSED, "")
    assert (reproduced.outcome, reproduced.reason) == (AttemptOutcome.PASSED, "")


def test_a_story_added_later_whose_only_own_test_passed_before_is_not_proven() -> None:
    """A test it owns that already passed shows nothing: still "needs review"."""
    verdict = decide(
        added_later([gate(old=PASSED, wanted=FAILED)], AddedBy.CI, owned=["old"]),
        rerun_alone=never_rerun,
        added_at_parent=never_at_parent,
        gates_as_they_were=never_as_they_were,
    )
    assert verdict.outcome is AttemptOutcome.NEEDS_REVIEW


def test_a_planned_story_is_not_held_to_the_added_later_rule() -> None:
    verdict = decide(
        Evidence(BEFORE, [gate(old=PASSED, wanted=FAILED)], ["tests"]),
        rerun_alone=never_rerun,
        added_at_parent=never_at_parent,
        gates_as_they_were=never_as_they_were,
    )
    assert verdict.outcome is AttemptOutcome.PASSED


def test_a_story_added_later_is_never_done_with_nothing_to_change() -> None:
    """Tests that pass at the head with no change show the branch's earlier work, not the
    review comment addressed: needs review, where a planned story would be done."""
    results = [gate(old=PASSED, wanted=FAILED, again=PASSED)]
    planned = Evidence(BEFORE, results, ["tests"], owned={"again"}, proven={"again"})
    later = replace(planned, added_by=AddedBy.REVIEW)
    assert decide_unchanged(planned).outcome is AttemptOutcome.NOTHING_TO_CHANGE
    verdict = decide_unchanged(later)
    assert verdict.outcome is AttemptOutcome.NEEDS_REVIEW
    assert verdict.reason == (
        "no test of its own shows the review comment addressed (none failed without its "
        "change and passes with it): a person reads the change; "
        "its tests pass on the branch as it is: again"
    )
