"""After stories judged on part of the suite (`checks: affected`), the whole suite at the
branch's head is their judge too: a test it finds failing that passed before is traced, by
bisecting the stories' commits, to the story whose commit broke it, which then needs review."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from worker.model.gates import GateResult, TestStatus
from worker.model.state import AttemptOutcome, AttemptRecord, StoryRecord, StoryState
from worker.run.context import RunContext
from worker.run.selected import run_selected
from worker.verdict.flaky import RERUNS, flaky_in
from worker.verdict.judging import KEPT, partly_judged, passed_before, tests_by_id

log = logging.getLogger(__name__)

# Which tests fail at the story commit with this index in the chain.
FailingAt = Callable[[int, Sequence[str]], set[str]]


def trace_breaks(ctx: RunContext, final: Sequence[GateResult]) -> dict[str, str]:
    """Each test the whole suite fails at the head that passed before (at the baseline, or
    in a story's check) and fails again alone, with the story whose commit it first fails
    on; that story now needs review, saying so. Nothing when no kept check ran part of the
    suite (every story was then judged on the whole). A test that passes alone failed only
    beside the others, and one that fails alone before the commits searched (on the commit
    the stories started from, or after the last story whose check saw it pass) cannot be
    traced by runs alone: the final checks name them, no story is blamed. A test a story's
    re-runs showed flaky is traced too when it fails alone every time on the head (RERUNS
    runs): kept out of every verdict, it could otherwise be broken by a later story unseen."""
    cp = ctx.cp
    if not partly_judged(cp.stories):
        return {}
    chain = _kept_chain(cp.stories)
    passed = passed_before(cp.stories, cp.baseline or [])
    broken = sorted(
        t
        for t, status in (tests_by_id(final) or {}).items()
        if status is TestStatus.FAILED and t in passed
    )
    if not broken:
        return {}
    # The commit the stories started from, then each story's: index i of the chain is i + 1.
    commits = [cp.baseline_sha or cp.start_sha or cp.base_sha]
    commits += [attempt.commit or "" for _, attempt in chain]

    def failing_on(n: int, label: str, tests: Sequence[str]) -> set[str]:
        ctx.git.restore(commits[n])
        found = run_selected(ctx, label, tests, narrow=True)
        return {t for t, status in found.items() if status == TestStatus.FAILED}

    def failing_at(index: int, tests: Sequence[str]) -> set[str]:
        return failing_on(index + 1, f"verification.bisect{index + 1}", tests)

    last = len(chain) - 1
    # A test a story's re-runs showed flaky is kept out of the verdict, so a later story
    # could break it unseen: it is traced when it fails alone every time on the head.
    flaky = flaky_in(cp.stories)
    try:
        steady = sorted(failing_at(last, broken))
        for n in range(2, RERUNS + 1):
            shown = [t for t in steady if t in flaky]
            again = failing_on(len(chain), f"verification.flaky{n}", shown) if shown else set()
            steady = [t for t in steady if t not in flaky or t in again]
        first: dict[str, int] = {}
        for low, tests in _searched_from(chain, steady).items():
            # The search reads runs alone and takes the test as passing before `low`: one
            # that fails alone there too (it passes only after another test has run) cannot
            # be traced by such runs, and would be pinned on the first commit searched.
            before_low = failing_on(low, f"verification.bisect{low}.before", tests)
            traceable = [t for t in tests if t not in before_low]
            first |= first_failing(traceable, low, last, failing_at)
    finally:
        ctx.git.restore(cp.head_sha)
    traced: dict[str, str] = {}
    for index in sorted(set(first.values())):
        record, attempt = chain[index]
        tests = sorted(t for t, at in first.items() if at == index)
        _needs_review(record, attempt.iteration, tests)
        traced |= {t: record.id for t in tests}
    if traced:
        ctx.folder.append_progress(
            "verification: the whole suite traced "
            + ", ".join(f"{t} to {story}" for t, story in traced.items())
        )
        log.warning("tests broken by a story's commit", extra={"run_id": cp.run_id})
    return traced


def first_failing(
    tests: Sequence[str], low: int, high: int, failing_at: FailingAt
) -> dict[str, int]:
    """For each test, the first index in [low, high] of the chain it fails at, given that it
    fails at `high` and passed before `low`: a bisection that splits the tests wherever
    they part, so tests broken by one commit cost one search between them."""
    if not tests:
        return {}
    if low == high:
        return dict.fromkeys(tests, low)
    middle = (low + high) // 2
    failing = failing_at(middle, tests)
    earlier = [t for t in tests if t in failing]
    later = [t for t in tests if t not in failing]
    return first_failing(earlier, low, middle, failing_at) | first_failing(
        later, middle + 1, high, failing_at
    )


def _searched_from(
    chain: Sequence[tuple[StoryRecord, AttemptRecord]], tests: Sequence[str]
) -> dict[int, list[str]]:
    """The tests by the first commit of the chain to search: the one after the last story
    whose own check saw the test pass (the baseline's result stands before the first). A test
    the run knew passing only from a later story's check may have failed before it (a test
    failing on the base): searching from the first commit would blame the first story for
    it. Past the head's own check there is nothing to search: no story is blamed."""
    groups: dict[int, list[str]] = {}
    for test in tests:
        seen = [
            i
            for i, (_, a) in enumerate(chain)
            if (tests_by_id(a.gates) or {}).get(test) is TestStatus.PASSED
        ]
        low = seen[-1] + 1 if seen else 0
        if low < len(chain):
            groups.setdefault(low, []).append(test)
    return groups


def _kept_chain(stories: Sequence[StoryRecord]) -> list[tuple[StoryRecord, AttemptRecord]]:
    """Each story commit on the branch with the attempt that kept it, oldest first."""
    kept = [(s, a) for s in stories for a in s.attempts if a.outcome in KEPT and a.commit]
    return sorted(kept, key=lambda pair: pair[1].iteration)


def _needs_review(record: StoryRecord, iteration: int, tests: Sequence[str]) -> None:
    """The story's kept attempt no longer passes: needs review, with the tests and why."""
    why = (
        f"the whole suite at the branch's head fails {', '.join(tests)}, which passed before "
        f"and fails from this story's commit on (its own check ran only the tests its change "
        "reaches by import)"
    )
    for index, attempt in enumerate(record.attempts):
        if attempt.iteration == iteration:
            reason = "; ".join(p for p in (attempt.reason, why) if p)
            record.attempts[index] = attempt.model_copy(
                update={"outcome": AttemptOutcome.NEEDS_REVIEW, "reason": reason}
            )
    record.state = StoryState.NEEDS_REVIEW
