"""How a story's state reads everywhere (PR body, progress comment, console): icon, order, count."""

from __future__ import annotations

from collections.abc import Sequence

from worker.model.fail_to_pass import fail_to_pass
from worker.model.review import ReviewRecord
from worker.model.state import AttemptOutcome, AttemptRecord, StoryRecord, StoryState

STATE_ICONS = {
    StoryState.PASSED: "✅",
    StoryState.FAILED: "❌",
    StoryState.UNVERIFIED: "⚠️",
    StoryState.PENDING: "⏳",
    StoryState.NEEDS_REVIEW: "🔎",
}
# The order states are counted in, in the headline and the console.
STATE_ORDER = (
    StoryState.PASSED,
    StoryState.NEEDS_REVIEW,
    StoryState.UNVERIFIED,
    StoryState.FAILED,
    StoryState.PENDING,
)


# Outcomes whose commit stays: a gate failing beside them failed before the story too.
KEPT_OUTCOMES = (
    AttemptOutcome.PASSED,
    AttemptOutcome.NOTHING_TO_CHANGE,
    AttemptOutcome.NEEDS_REVIEW,
    AttemptOutcome.UNVERIFIED,
)


def plural(count: int, noun: str) -> str:
    """ "1 attempt", "3 attempts": every count shown to a person, in one place."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def attempt_outcome(attempt: AttemptRecord) -> str:
    """ "gates failed: t1 still fails", "no changes outside forbidden paths": the outcome and
    its reason, said once when the reason starts with the outcome's own words."""
    reason, outcome = attempt.reason.strip(), str(attempt.outcome)
    if not reason:
        return outcome
    return reason if reason.startswith(outcome) else f"{outcome}: {reason}"


def gate_summary(attempt: AttemptRecord) -> str:
    """ "tests ok, lint failed as before this story (2 failing tests not its own)": what each
    gate did, so a failed gate beside a kept attempt says why it did not count against it."""
    parts = []
    for gate in attempt.gates:
        if gate.passed:
            parts.append(f"{gate.name} ok")
        elif attempt.outcome in KEPT_OUTCOMES:
            failed = gate.failed_tests
            detail = f" ({plural(len(failed), 'failing test')} not its own)" if failed else ""
            parts.append(f"{gate.name} failed as before this story{detail}")
        else:
            parts.append(f"{gate.name} FAILED")
    return ", ".join(parts)


def state_label(story: StoryRecord) -> str:
    """ "passed (nothing to change)", "failed": a story's state as every report names it.
    Passed with nothing to change says so: judged on its tests at the head, nothing typed."""
    last = story.attempts[-1].outcome if story.attempts else None
    if story.state is StoryState.PASSED and last is AttemptOutcome.NOTHING_TO_CHANGE:
        return str(AttemptOutcome.NOTHING_TO_CHANGE)
    return str(story.state)


def count_stories(n: int) -> str:
    """ "1 story", "2 stories": every place that counts stories says it the same way."""
    return f"{n} story" if n == 1 else f"{n} stories"


def story_counts(stories: Sequence[StoryRecord]) -> str:
    """ "3 stories: 2 passed, 1 failed": every state with its count, in one order."""
    total = len(stories)
    counts = [
        f"{n} {state}"
        for state in STATE_ORDER
        if (n := sum(1 for s in stories if s.state is state))
    ]
    return f"{count_stories(total)}: " + (", ".join(counts) if counts else "none planned")


def tests_line(story: StoryRecord) -> str:
    """ "1 fail→pass, 12 pass→pass": what the story's last attempt was judged on. Fail→pass
    as the verdict counts it (model/fail_to_pass.py): a passing test that is not the story's
    own, or did not fail without it, is not called one."""
    checks = story.attempts[-1].tests if story.attempts else []
    passing = [c for c in checks if c.after == "passed" and not c.problem]
    fail_pass = sum(1 for c in passing if fail_to_pass(c))
    pass_pass = sum(1 for c in passing if c.before == "passed")
    broken = sum(1 for c in checks if c.problem)
    line = f"{fail_pass} fail→pass, {pass_pass} pass→pass"
    return line + (f", {broken} failing" if broken else "")


def last_review(story: StoryRecord) -> ReviewRecord | None:
    """The blind review of the story's last attempt, if it had one."""
    return story.attempts[-1].review if story.attempts else None


def review_cell(story: StoryRecord) -> str:
    """ "2 of 2 criteria met", "not reviewed": the review's one line for a table."""
    review = last_review(story)
    return review.headline() if review is not None else "not reviewed"


def frozen_note(story: StoryRecord) -> str:
    """ "tests frozen in 1a2b3c4d5e6f; US-002 changed tests/test_api.py while implementing:
    reverted": a story's frozen tests and what was put back on its test side, one line."""
    parts = []
    frozen = story.frozen
    if frozen is not None and frozen.commit:
        how = "" if frozen.proven else " (not proven failing: no per-test results)"
        if frozen.proven and frozen.proof_selected:  # else the whole suite ran on the parent
            how = f" (proven with {', '.join(frozen.proof_selected)} alone)"
        parts.append(f"tests frozen in {frozen.commit[:12]}{how}")
    elif frozen is not None:
        parts.append("frozen with no new tests (judged on the plan's)")
    if frozen is not None and frozen.changed_passing:
        parts.append("changed a passing test: " + ", ".join(frozen.changed_passing))
    last = story.attempts[-1] if story.attempts else None
    if last is not None and last.tests_reverted:
        changed = ", ".join(last.tests_reverted)
        parts.append(f"{story.id} changed {changed} while implementing: reverted")
    return "; ".join(parts)
