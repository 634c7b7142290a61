"""Where a story attempt is judged: its tests, the proof its new tests give, its gate changes."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from worker.model.gates import GateResult
from worker.model.state import AttemptOutcome, TestCheck
from worker.verdict.judging import Judgement, Verdict, judge_story

# The attempt's outcome for each verdict on its tests, before its gate changes are weighed.
OUTCOMES = {
    Verdict.PASSED: AttemptOutcome.PASSED,
    Verdict.UNVERIFIED: AttemptOutcome.UNVERIFIED,
    Verdict.FAILED: AttemptOutcome.GATES_FAILED,
}


@dataclass(frozen=True)
class Evidence:
    """What one attempt's gates showed, and what they are held against."""

    reference: Sequence[GateResult]  # the gates of the last kept state (or the baseline)
    results: Sequence[GateResult]  # the gates on the attempt's commit
    expected: Sequence[str]  # every gate's name
    owned: Collection[str] = ()  # the tests the plan gave the story, and those it added
    added: Sequence[str] = ()  # the tests the story added
    rewritten: Collection[str] = ()  # tests that ran before and the story changed
    gate_changes: Sequence[str] = ()  # files it changed that decide what a gate runs


@dataclass(frozen=True)
class StoryVerdict:
    """What the worker decided about one attempt: its outcome, why, and each test it judged."""

    outcome: AttemptOutcome
    reason: str
    tests: list[TestCheck] = field(default_factory=list)


def decide(
    evidence: Evidence,
    *,
    added_at_parent: Callable[[], Mapping[str, str]],
    gates_as_they_were: Callable[[], Sequence[GateResult]],
) -> StoryVerdict:
    """The attempt's one verdict. Its tests judged as SWE-bench judges a patch (judge_story);
    then, only when that passes, the tests it added run on its parent (`added_at_parent`: each
    must fail there, or it proves nothing); then, when it changed what a gate runs and did not
    fail, the gates run as they were (`gates_as_they_were`): a pass that rests on the change
    needs a person's review. The two callables run gates, so each is called only when needed."""
    judged = _judge(evidence)
    at_parent: Mapping[str, str] = {}
    if judged.verdict is Verdict.PASSED and evidence.added:
        at_parent = added_at_parent()
        judged = _judge(evidence, at_parent=at_parent)
    outcome, why = OUTCOMES[judged.verdict], judged.reason
    changes = ", ".join(evidence.gate_changes)
    if evidence.gate_changes and judged.verdict is Verdict.FAILED:
        why += f"; it changed what a gate runs: {changes}"
    elif evidence.gate_changes:
        again = _judge(evidence, results=gates_as_they_were(), at_parent=at_parent)
        if again.verdict.worse_than(judged.verdict):
            outcome = AttemptOutcome.NEEDS_REVIEW
            why = (
                f"passes only with its change to what a gate runs ({changes}); "
                f"with the gates as they were: {again.reason or again.verdict}"
            )
    return StoryVerdict(outcome, why, judged.tests)


def _judge(
    evidence: Evidence,
    *,
    results: Sequence[GateResult] | None = None,
    at_parent: Mapping[str, str] | None = None,
) -> Judgement:
    return judge_story(
        evidence.reference,
        evidence.results if results is None else results,
        evidence.expected,
        owned=evidence.owned,
        at_parent=at_parent,
        rewritten=evidence.rewritten,
    )
