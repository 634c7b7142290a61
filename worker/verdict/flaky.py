"""Flaky tests: a failing test that passed before, re-run alone on both sides, and the rule."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from worker.model.gates import GateResult, TestStatus
from worker.model.state import AttemptOutcome, StoryRecord

RERUNS = 2  # times each such test runs again alone, on the story's commit and on its parent
# Attempts whose commit stays on the branch (judging.KEPT, which imports this module); with
# nothing to change, the tests it was shown done by, when it committed them, and its gates
# at the head (the state the next story is judged against).
KEPT_OUTCOMES = (
    AttemptOutcome.PASSED,
    AttemptOutcome.NOTHING_TO_CHANGE,
    AttemptOutcome.UNVERIFIED,
    AttemptOutcome.NEEDS_REVIEW,
)


class Rerun(StrEnum):
    """What re-running a test that passed before and fails with the story showed."""

    # Its result changes without the story's change: it is flaky, and kept out of the verdict.
    FLAKY = "flaky"
    # Steady without the story's change, flipping with it: the story made it unstable.
    UNSTABLE = "unstable"
    # Fails every time with the story, passes every time without it: the story broke it.
    BROKEN = "broken"
    # Fails every time without the story too, where no check had run it on the story's parent
    # (an earlier story was judged on part of the suite): broken before this story, traced
    # to the story that broke it when the whole suite judges the head (end_bisect.py).
    BEFORE = "broken before"


@dataclass(frozen=True)
class Reruns:
    """Each re-run test's statuses, in the order they ran, on each side."""

    story: Mapping[str, Sequence[str]] = field(default_factory=dict)  # on the story's commit
    parent: Mapping[str, Sequence[str]] = field(default_factory=dict)  # on its parent


@dataclass(frozen=True)
class RerunFinding:
    """One re-run test: every result it gave on each side, the first run included, and what
    they show."""

    test_id: str
    story: tuple[str, ...]
    parent: tuple[str, ...]
    rerun: Rerun

    @property
    def flaky(self) -> bool:
        return self.rerun is Rerun.FLAKY

    def said(self) -> str:
        """Its results as a person reads them: "with the story: failed, passed, failed;
        without it: passed, passed, failed"."""
        return f"with the story: {', '.join(self.story)}; without it: {', '.join(self.parent)}"


def flips(statuses: Sequence[str]) -> bool:
    """Did this test both pass and fail? A skipped or missing re-run shows neither."""
    return {TestStatus.PASSED, TestStatus.FAILED} <= set(statuses)


def judge_reruns(
    test_ids: Sequence[str], reruns: Reruns, *, unseen: Collection[str] = ()
) -> dict[str, RerunFinding]:
    """The rule, for tests that passed before the story and failed with it (the first run on
    each side: passed on the parent, failed on the story's commit), given their re-runs alone.

    A test whose re-runs on the parent, where the story's change is not, both pass and fail
    is flaky: kept out of the verdict. The parent is where flakiness must show: the story's
    own code runs on its side and could make a test it broke fail only every other time. Its
    re-runs alone are held against each other, never against the whole run it passed in: one
    that passed there and fails alone every time depends on which tests run before it, which
    is no chance at all, and the story's whole run failed it. A test steady on the parent
    that flips with the story counts against it (the story made it unstable), and so does one
    that fails every time with the story; a re-run that gave no result proves nothing, so it
    counts too.

    `unseen`: tests no check ran on the parent (their "passed" is older): only their re-runs
    there speak for it, and one that fails there every time was broken before this story."""
    found = {}
    for test_id in test_ids:
        story = (str(TestStatus.FAILED), *reruns.story.get(test_id, ()))
        alone = tuple(reruns.parent.get(test_id, ()))
        seen = () if test_id in unseen else (str(TestStatus.PASSED),)
        parent = (*seen, *alone)
        if not seen and alone and set(alone) == {str(TestStatus.FAILED)}:
            rerun = Rerun.BEFORE
        elif flips(alone):
            rerun = Rerun.FLAKY
        elif flips(story):
            rerun = Rerun.UNSTABLE
        else:
            rerun = Rerun.BROKEN
        found[test_id] = RerunFinding(test_id, story, parent, rerun)
    return found


def flaky_in(stories: Sequence[StoryRecord]) -> dict[str, str]:
    """Every test a kept attempt of these stories showed flaky, with which story and what its
    re-runs gave: kept out of the run's verdict too, and named wherever it is shown."""
    found: dict[str, str] = {}
    for story in stories:
        for attempt in story.attempts:
            if attempt.outcome in KEPT_OUTCOMES:
                found |= {c.id: f"{story.id}: {c.reruns}" for c in attempt.tests if c.flaky}
    return found


def red_only_by(gate: GateResult, flaky: Collection[str]) -> bool:
    """Is this gate red only because tests shown flaky failed?"""
    failed = gate.failed_tests
    return (
        not gate.passed and not gate.timed_out and bool(failed) and set(failed or ()) <= set(flaky)
    )
