"""Where a story attempt is judged: its tests, the proof its new tests give, its gate changes."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from worker.model.fail_to_pass import fail_to_pass
from worker.model.feedback import AddedBy
from worker.model.gates import GateResult, TestStatus
from worker.model.review import ReviewOutcome, ReviewRecord
from worker.model.state import AttemptOutcome, StoryRecord, TestCheck
from worker.verdict.flaky import RerunFinding, Reruns, judge_reruns
from worker.verdict.judging import KEPT, Judgement, Verdict, judge_story, tests_by_id

# The attempt's outcome for each verdict on its tests, before its gate changes are weighed.
OUTCOMES = {
    Verdict.PASSED: AttemptOutcome.PASSED,
    Verdict.UNVERIFIED: AttemptOutcome.UNVERIFIED,
    Verdict.FAILED: AttemptOutcome.GATES_FAILED,
}
# The outcomes that call a story done; a story added after the plan gets them only with proof.
CALLED_DONE = (AttemptOutcome.PASSED, AttemptOutcome.NOTHING_TO_CHANGE)
# Why a story added after the plan passes no further than "needs review" when no test of its
# own went from failing to passing: pass→pass alone shows nothing was broken, not that the
# comment was addressed or CI fixed, and an agent making a trivial edit gets that for free.
UNPROVEN = {
    AddedBy.REVIEW: (
        "no test of its own shows the review comment addressed (none failed without its "
        "change and passes with it): a person reads the change"
    ),
    AddedBy.CI: (
        "no test the worker ran showed the CI failure fixed (none of CI's failing tests "
        "failed here and passes now): the next CI result decides"
    ),
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
    # Of `owned`, the tests something showed this story's work in: failing at the baseline,
    # or added by one of its kept attempts (proven failing on its parent).
    proven: Collection[str] = ()
    # Set for a story added after the plan: it passes only with a fail→pass test (UNPROVEN).
    added_by: AddedBy | None = None
    # Tests of `reference` no check ran on the story's parent (partial_runs.unseen_at_head):
    # their re-runs there decide whether they passed before it.
    unseen: Collection[str] = ()


@dataclass(frozen=True)
class StoryVerdict:
    """What the worker decided about one attempt: its outcome, why, and each test it judged."""

    outcome: AttemptOutcome
    reason: str
    tests: list[TestCheck] = field(default_factory=list)


def decide(
    evidence: Evidence,
    *,
    rerun_alone: Callable[[Sequence[str]], Reruns],
    added_at_parent: Callable[[], Mapping[str, str]],
    gates_as_they_were: Callable[[], Sequence[GateResult]],
    alike_at_head: Callable[[Sequence[str]], Mapping[str, str] | None] | None = None,
) -> StoryVerdict:
    """The attempt's one verdict. Its tests judged as SWE-bench judges a patch (judge_story);
    when the only failures are tests that passed before, those run again alone on both sides
    (`rerun_alone`) and the flaky ones are kept out (flaky.py); then, only when that passes,
    the tests it added run on its parent (`added_at_parent`: each must fail there, or it
    proves nothing), and again here run exactly as they ran there (`alike_at_head`: None when
    that was a whole run, as here): a test that passes in the whole run but not in that one
    needs a person's review, since its result depends on which tests run with it; then, when
    it changed what a gate runs and did not fail, the gates run as they were
    (`gates_as_they_were`): a pass that rests on the change needs a person's review. The
    callables run gates, so each is called only when needed."""
    judged = _judge(evidence)
    reruns: Mapping[str, RerunFinding] = {}
    if judged.verdict is Verdict.FAILED and (again_alone := judged.regressions()):
        reruns = judge_reruns(again_alone, rerun_alone(again_alone), unseen=evidence.unseen)
        judged = _judge(evidence, reruns=reruns)
    at_parent: Mapping[str, str] = {}
    if judged.verdict is Verdict.PASSED and evidence.added:
        at_parent = added_at_parent()
        judged = _judge(evidence, at_parent=at_parent, reruns=reruns)
    changes = ", ".join(evidence.gate_changes)
    if judged.verdict is Verdict.PASSED and at_parent and alike_at_head is not None:
        alike = alike_at_head(sorted(at_parent))
        if unlike := _unlike(judged, alike or {}):
            why = "; ".join(c.problem for c in unlike.values())
            why += f"; it changed what a gate runs: {changes}" if changes else ""
            tests = [unlike.get(c.id, c) for c in judged.tests]
            verdict = StoryVerdict(AttemptOutcome.NEEDS_REVIEW, why, tests)
            return distrusted(verdict, evidence.results)
    outcome, why = OUTCOMES[judged.verdict], judged.reason
    if evidence.gate_changes and judged.verdict is Verdict.FAILED:
        why += f"; it changed what a gate runs: {changes}"
    elif evidence.gate_changes:
        again = _judge(evidence, results=gates_as_they_were(), at_parent=at_parent, reruns=reruns)
        if again.verdict.worse_than(judged.verdict):
            outcome = AttemptOutcome.NEEDS_REVIEW
            why = (
                f"passes only with its change to what a gate runs ({changes}); "
                f"with the gates as they were: {again.reason or again.verdict}"
            )
    verdict = distrusted(StoryVerdict(outcome, why, judged.tests), evidence.results)
    return unproven(verdict, evidence.added_by)


def added_by(record: StoryRecord) -> AddedBy | None:
    """What added the story after the plan (review feedback, red CI); None: planned."""
    if record.ci is not None:
        return AddedBy.CI
    return AddedBy.REVIEW if record.source is not None else None


def unproven(verdict: StoryVerdict, by: AddedBy | None) -> StoryVerdict:
    """A pass of a story added after the plan with no fail→pass test of its own: "needs
    review" (UNPROVEN), never "passed". A planned story cannot get here without one (its
    tests call must freeze a test, or its plan's tests fail at the baseline); a feedback or
    CI-fix story may bring none, and then nothing but pass→pass judged it. Nor is it ever
    "passed (nothing to change)": with no change, no test failed without it, and tests that
    fail on the base commit show the pull request's earlier work, not the comment addressed."""
    if by is None or verdict.outcome not in CALLED_DONE:
        return verdict
    if verdict.outcome is AttemptOutcome.PASSED and any(fail_to_pass(c) for c in verdict.tests):
        return verdict
    why = "; ".join(p for p in (UNPROVEN[by], verdict.reason) if p)
    return replace(verdict, outcome=AttemptOutcome.NEEDS_REVIEW, reason=why)


def _unlike(judged: Judgement, alike: Mapping[str, str]) -> dict[str, TestCheck]:
    """The story's new tests that pass in the whole run and not when run as their proof on
    the parent ran (`alike`), each with why it keeps the story from passing."""
    found = {}
    for check in judged.tests:
        status = alike.get(check.id)
        if check.added and check.after == TestStatus.PASSED and status not in (None, "passed"):
            problem = (
                f"{check.id} passes in the whole suite's run but is {status} when only the "
                "story's tests run, as they ran to prove it failed without the story: its "
                "result depends on which tests run with it"
            )
            found[check.id] = check.model_copy(update={"problem": problem})
    return found


def distrusted(verdict: StoryVerdict, results: Sequence[GateResult]) -> StoryVerdict:
    """The verdict held to what the results can show: when the worker's collectors disagree
    (collected ids against reported ones, the exit code against the results) a pass is
    "needs review"; when a gate that runs tests gave no per-test results, a pass is
    "unverified", with the configuration line that would give them. Never "passed"."""
    disagreeing = [
        f"gate {g.name}: {'; '.join(g.disagreements)}" for g in results if g.disagreements
    ]
    unverified = [g.no_results for g in results if g.no_results]
    if disagreeing:
        why = "the worker's results disagree: " + "; ".join(disagreeing)
        if verdict.outcome is AttemptOutcome.GATES_FAILED:
            return replace(verdict, reason=f"{verdict.reason}; {why}")
        if verdict.outcome in (AttemptOutcome.NO_CHANGES, AttemptOutcome.CHECK_FAILED):
            return verdict
        if verdict.outcome is AttemptOutcome.NEEDS_REVIEW:  # both reasons stand
            return replace(verdict, reason=f"{verdict.reason}; {why}")
        return replace(verdict, outcome=AttemptOutcome.NEEDS_REVIEW, reason=why)
    if unverified and verdict.outcome in (AttemptOutcome.PASSED, AttemptOutcome.NOTHING_TO_CHANGE):
        return replace(verdict, outcome=AttemptOutcome.UNVERIFIED, reason="; ".join(unverified))
    if unverified and verdict.outcome is AttemptOutcome.UNVERIFIED:
        return replace(verdict, reason="; ".join([verdict.reason, *unverified]))
    return verdict


def decide_reviewed(
    verdict: StoryVerdict, review: ReviewRecord, *, number: int, max_retries: int
) -> StoryVerdict:
    """A passed attempt after its blind review. Every criterion met: still passed. A criterion
    not met or not shown: back to the implementer with the finding while the story has
    attempts left, else "needs review" with its commit kept. A review that could not be
    done (refused, malformed twice, the reviewer failed): "needs review", never "passed".
    The review is a model's opinion; it can only keep a story from "passed", never make one."""
    if verdict.outcome is not AttemptOutcome.PASSED or review.outcome is ReviewOutcome.CLEAN:
        return verdict
    if review.outcome is ReviewOutcome.UNMET:
        found = "; ".join(review.finding_lines())
        if number < max_retries:
            why = f"its tests pass, but the blind review found criteria not met: {found}"
            return StoryVerdict(AttemptOutcome.CRITERIA_UNMET, why, verdict.tests)
        why = (
            f"its tests pass, but after {number} attempts the blind review still found "
            f"criteria not met: {found}"
        )
        return StoryVerdict(AttemptOutcome.NEEDS_REVIEW, why, verdict.tests)
    why = f"its tests pass, but the blind review could not be done: {review.problem}"
    return StoryVerdict(AttemptOutcome.NEEDS_REVIEW, why, verdict.tests)


def ready_after_review(review: ReviewRecord | None) -> str | None:
    """Why a PR the checks would make ready stays a draft after the blind review of the whole
    change: None when every criterion was met (or no review ran)."""
    if review is None or review.outcome is ReviewOutcome.CLEAN:
        return None
    if review.outcome is ReviewOutcome.UNMET:
        return "the blind review of the whole change found criteria not met: " + "; ".join(
            review.finding_lines()
        )
    return f"the blind review of the whole change could not be done: {review.problem}"


def own_tests(record: StoryRecord) -> list[str]:
    """The tests a story is judged on: those the plan gave it, and those its last kept attempt
    added (kept across a retry, which moves its attempts to `earlier_attempts`)."""
    kept = [a for a in [*record.earlier_attempts, *record.attempts] if a.outcome in KEPT]
    added = [c.id for c in kept[-1].tests if c.owned] if kept else []
    return sorted({*record.tests, *added})


def proven_tests(record: StoryRecord, baseline: Mapping[str, TestStatus]) -> list[str]:
    """The story's own tests that can show it done: a test the plan gave it counts only if it
    failed at the baseline; one the story added counts (its fail→pass was proven). A planned
    claim of a test that already passed shows nothing: an agent choosing such tests and then
    changing nothing must not come out "passed"."""
    added = set(own_tests(record)) - set(record.tests)
    failing_before = {t for t in record.tests if baseline.get(t) is not TestStatus.PASSED}
    return sorted(added | failing_before)


def decide_unchanged(evidence: Evidence) -> StoryVerdict:
    """An attempt that left no change, judged on the branch as it is (`evidence.results`):
    "passed (nothing to change)" when the story has tests of its own, each of them passes,
    and every test that passed before still does; otherwise "no changes", as before. A story
    without tests of its own cannot be shown to be done by an agent that did nothing."""
    if not evidence.owned:
        return StoryVerdict(AttemptOutcome.NO_CHANGES, "no changes")
    if not evidence.proven:
        why = "no changes (its tests passed before the story: nothing shows it done)"
        return StoryVerdict(AttemptOutcome.NO_CHANGES, why)
    judged = _judge(evidence)
    now = tests_by_id(evidence.results) or {}
    # Every other test is held to pass→pass by judge_story: a test another story owns may
    # still fail here, waiting for that story.
    own_pass = all(now.get(t) is TestStatus.PASSED for t in evidence.owned)
    if judged.verdict is Verdict.PASSED and own_pass:
        why = f"its tests pass on the branch as it is: {', '.join(sorted(evidence.owned))}"
        verdict = StoryVerdict(AttemptOutcome.NOTHING_TO_CHANGE, why, judged.tests)
        return unproven(distrusted(verdict, evidence.results), evidence.added_by)
    return StoryVerdict(AttemptOutcome.NO_CHANGES, "no changes", judged.tests)


def _judge(
    evidence: Evidence,
    *,
    results: Sequence[GateResult] | None = None,
    at_parent: Mapping[str, str] | None = None,
    reruns: Mapping[str, RerunFinding] | None = None,
) -> Judgement:
    return judge_story(
        evidence.reference,
        evidence.results if results is None else results,
        evidence.expected,
        owned=evidence.owned,
        at_parent=at_parent,
        rewritten=evidence.rewritten,
        reruns=reruns,
    )
