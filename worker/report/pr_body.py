"""Where the pull request body is written: a pure render of the run's result to Markdown."""

from __future__ import annotations

from collections.abc import Sequence

from worker.model.gates import GateResult, is_partial
from worker.model.state import (
    AttemptOutcome,
    AttemptRecord,
    RunResult,
    StoryRecord,
    StoryState,
    TestCheck,
)
from worker.report.pr_sections import cell, frozen_tests, inline, review_lines, whole_review
from worker.report.story_states import (
    STATE_ICONS,
    attempt_outcome,
    last_review,
    plural,
    review_cell,
    state_label,
    story_counts,
    tests_line,
)

RUN_MARKER = "<!-- reqdrive:run {run_id} -->"
SCOPE_SHOWN = 5  # test files named per story judged on part of the suite


def render_pr_body(result: RunResult, *, closes_issue: int | None = None) -> str:
    """The pull request body, from the run's result alone (pure)."""
    parts = [
        _summary(result),
        *([f"Closes #{closes_issue}"] if closes_issue is not None else []),
        _stories_table(result.stories),
        frozen_tests(result.stories),
        _story_details(result.stories),
        whole_review(result.review),
        _gates_table(result.baseline_gates, result.final_gates),
        _where_results_came_from(result),
        _baseline_section(result),
        _failing_on_base(result),
        _still_failing(result),
        _flaky(result),
        _reverted_and_refused(result.stories),
        _checklist(result.stories),
        _time_and_cost(result),
        RUN_MARKER.format(run_id=cell(result.run_id)),
    ]
    return "\n\n".join(p for p in parts if p) + "\n"


def _source(source: str) -> str:
    # A requirement given as text on the command line has no file to name.
    return "the requirement given as text" if source == "text" else f"`{inline(source)}`"


def _summary(result: RunResult) -> str:
    lines = [
        f"## {inline(result.project or result.requirement_source)}",
        "",
        f"reqdrive ran **{story_counts(result.stories)}** for "
        f"{_source(result.requirement_source)} on `{result.branch}` "
        f"(base `{result.base_ref}` at `{result.base_sha[:12]}`{_started_elsewhere(result)}). "
        "Every verdict below comes from the worker running the repository's own checks, "
        "not from the agent.",
    ]
    if result.ready:
        unverified = result.count(StoryState.UNVERIFIED)
        if unverified:
            lines.append(
                f"\n**Ready for review**: the final checks are green; {unverified} of "
                f"{len(result.stories)} stories are unverified (see below)."
            )
        elif result.failing_on_base:
            names = ", ".join(f"`{cell(name)}`" for name in result.failing_on_base)
            lines.append(
                "\n**Ready for review**: every story passed and the final checks are green, "
                f"but for {names}, which {'fails' if len(result.failing_on_base) == 1 else 'fail'} "
                "on the base too (not this PR's doing, see below)."
            )
        else:
            lines.append(
                "\n**Ready for review**: every story passed and the final checks are green."
            )
    else:
        lines.append(f"\n**Draft**: {inline(result.draft_reason or 'not every check passed')}.")
    if result.stop_reason is not None:
        lines.append(f"Stopped because: {result.stop_reason}.")
    if not result.per_test_results and (result.final_gates or result.baseline_gates):
        lines.append(
            "\n**No per-test results**: this repository's checks report no result per test, "
            "so the worker could only see whole checks pass or fail. A story is *unverified*, "
            "and the pull request a draft, while a check that runs tests gives no per-test "
            "results, or when a check that already failed before it still fails and names no "
            "findings (`path:line: message`, as linters print them): nothing shows whether it "
            "did its job. Checks that run no tests judge a story whole. Name the test runner "
            "(`runner:` in the gate) or its report (`junit:`) to get per-test verdicts "
            "(docs/verification.md in reqdrive)."
        )
    return "\n".join(lines)


def _stories_table(stories: Sequence[StoryRecord]) -> str:
    rows = [
        "### Stories",
        "",
        "| | Story | Title | State | Attempts | Tests | Commit | Review |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in stories:
        commit = f"`{s.commit[:12]}`" if s.commit else "—"
        last = s.attempts[-1].reason if s.attempts and s.state is not StoryState.PASSED else ""
        state = state_label(s) + (f" ({cell(last)})" if last else "")
        rows.append(
            f"| {STATE_ICONS[s.state]} | {cell(s.id)} | {cell(s.title)} | {state} "
            f"| {len(s.attempts)} | {_tests_cell(s)} | {commit} | {cell(review_cell(s))} |"
        )
    return "\n".join(rows)


def _tests_cell(story: StoryRecord) -> str:
    checks = [c for c in _last_checks(story) if c.owned]
    if not checks:
        return "—" if not story.tests else f"{len(story.tests)} owned"
    passing = sum(1 for c in checks if c.after == "passed" and not c.problem)
    return f"{passing} of {len(checks)} pass"


def _last_checks(story: StoryRecord) -> list[TestCheck]:
    return story.attempts[-1].tests if story.attempts else []


def _story_details(stories: Sequence[StoryRecord]) -> str:
    lines = ["### What each story was judged on"]
    for s in stories:
        tried = f"{len(s.attempts)} attempt{'s' * (len(s.attempts) != 1)}"
        lines += ["", f"**{cell(s.id)}** — {state_label(s)} after {tried}"]
        lines += _test_lines(s)
        if s.attempts:
            lines.append(f"- tests: {tests_line(s)}")
            lines += _scope_line(s.attempts[-1])
        lines += review_lines(last_review(s))
        for attempt in s.attempts:
            if attempt.outcome is not AttemptOutcome.PASSED or attempt.reason:
                lines.append(f"- attempt {attempt.attempt}: {inline(attempt_outcome(attempt))}")
            if attempt.gate_changes:
                lines.append(
                    f"- attempt {attempt.attempt} changed what a gate runs: "
                    + ", ".join(f"`{cell(p)}`" for p in attempt.gate_changes)
                )
    return "\n".join(lines)


def _scope_line(attempt: AttemptRecord) -> list[str]:
    """What its check ran, when that was part of the suite (`checks: affected`)."""
    scope = next((g.selected for g in attempt.gates if g.selected is not None), None)
    if scope is None:
        return []
    files = [name for name in scope if name.endswith(".py")]
    shown = ", ".join(f"`{cell(f)}`" for f in files[:SCOPE_SHOWN])
    more = f" and {len(files) - SCOPE_SHOWN} more" if len(files) > SCOPE_SHOWN else ""
    return [
        f"- its check ran only the tests its change reaches: {shown or 'its own'}{more}; "
        "the whole suite judged the branch's head"
    ]


def _test_lines(story: StoryRecord) -> list[str]:
    checks = _last_checks(story)
    owned = [c for c in checks if c.owned]
    lines = []
    for c in owned:
        parent = f"; without the story's change: {c.at_parent}" if c.added else ""
        kind = "added" if c.added else "owned"
        problem = f" — {inline(c.problem)}" if c.problem else ""
        lines.append(f"- `{cell(c.id)}` ({kind}): {c.before} → {c.after}{parent}{problem}")
    if not owned and story.tests:
        lines += [f"- `{cell(t)}` (owned): not judged yet" for t in story.tests]
    broken = [c for c in checks if not c.owned and c.problem]
    lines += [f"- `{cell(c.id)}`: {c.before} → {c.after} — {inline(c.problem)}" for c in broken]
    lines += [
        f"- `{cell(c.id)}`: flaky, kept out of the verdict ({inline(c.reruns)})"
        for c in checks
        if c.flaky
    ]
    if not owned and not story.tests and story.attempts:
        lines.append("- no test of its own: judged only on not breaking the others")
    return lines


def _gates_table(baseline: Sequence[GateResult], final: Sequence[GateResult]) -> str:
    if not final and not baseline:
        return (
            "### Checks\n\nNo gates are configured (`testCommand`, `lintCommand`, `gates`): "
            "nothing verified these changes."
        )
    before = {g.name: g for g in baseline}
    rows = [
        "### Checks",
        "",
        "| Gate | Base commit | This branch | Command |",
        "| --- | --- | --- | --- |",
    ]
    for gate in final:
        rows.append(
            f"| {cell(gate.name)} | {_gate_state(before.get(gate.name))} "
            f"| {_gate_state(gate)} | `{cell(gate.command)}` |"
        )
    return "\n".join(rows)


def _where_results_came_from(result: RunResult) -> str:
    """Results not measured again, and whose they are."""
    lines = []
    if result.baseline_cached:
        lines.append(
            "The base commit's results come from an earlier run on the same tree with the same "
            f"checks and configuration (cache entry {inline(result.baseline_cached)})."
        )
    if any(is_partial(a.gates) for s in result.stories for a in s.attempts):
        lines.append(
            "Some stories were judged on the tests their change reaches by import "
            "(`checks: affected`); the final checks ran the whole suite on this branch's head, "
            "and a test it found broken was traced to the story whose commit broke it."
        )
    if result.final_gates_from:
        lines.append(
            "The final checks were not run again: this branch's head was already judged with "
            f"the same checks, in {inline(result.final_gates_from)}."
        )
    return "\n".join(lines)


def _gate_state(gate: GateResult | None) -> str:
    if gate is None:
        return "not run"
    if gate.timed_out:
        return "⏱️ timed out"
    if gate.tests is not None and not gate.tests:
        return ("✅ pass" if gate.passed else "❌ fail") + " (no tests ran)"
    counted = "" if gate.tests is None else f" ({len(gate.tests)} tests)"
    if gate.passed:
        return f"✅ pass{counted}"
    if gate.tests is None or gate.failed_tests is None:
        return "❌ fail"
    return f"❌ fail ({len(gate.failed_tests)} of {len(gate.tests)} tests failing)"


def _started_elsewhere(result: RunResult) -> str:
    """Said beside the base when the stories did not start on it (an earlier run's head)."""
    if result.start_sha in (None, result.base_sha):
        return ""
    sha = result.start_sha[:12]
    return f"; the stories started from `{sha}`, where an earlier run left the branch"


def _baseline_section(result: RunResult) -> str:
    # The baseline is measured where the stories started: the base only when they started there.
    start = "the starting commit" if _started_elsewhere(result) else "the base commit"
    before = [g for g in result.baseline_gates if g.tests]
    if before and all(g.passed for g in result.baseline_gates):
        total = sum(len(g.tests or {}) for g in before)
        return (
            f"### {start[0].upper()}{start[1:]}\n\nEvery test passed on {start} "
            f"({total} tests): each story had to keep them passing and prove itself with tests "
            "of its own."
        )
    if not result.fixed_tests and not result.remaining_tests:
        return ""
    lines = [
        f"### Failures on {start}",
        "",
        "These tests failed before this run; the plan gave each to the story that must make "
        "it pass.",
    ]
    if result.fixed_tests:
        lines += ["", f"Fixed by this branch ({len(result.fixed_tests)}):"]
        lines += [f"- `{cell(t)}`" for t in result.fixed_tests]
    if result.remaining_tests:
        lines += ["", f"Still failing ({len(result.remaining_tests)}):"]
        lines += [f"- `{cell(t)}`" for t in result.remaining_tests]
    return "\n".join(lines)


def _failing_on_base(result: RunResult) -> str:
    if not result.failing_on_base:
        return ""
    lines = ["### Fails on the base too (not this PR's doing)", ""]
    lines += [f"- `{cell(name)}`: {inline(why)}" for name, why in result.failing_on_base.items()]
    return "\n".join(lines)


def _still_failing(result: RunResult) -> str:
    if not result.per_test_results:
        return ""
    if not result.still_failing:
        return "### Tests still failing\n\nNone: every test the checks ran passes on this branch."
    lines = ["### Tests still failing", ""]
    lines += [f"- `{cell(t)}`: {inline(why)}" for t, why in result.still_failing.items()]
    return "\n".join(lines)


def _flaky(result: RunResult) -> str:
    if not result.flaky_tests:
        return ""
    lines = [
        "### Flaky tests (kept out of the verdict)",
        "",
        "Each passed before its story and failed with it; run again alone, twice with the "
        "story's change and twice without, its result changed without the change.",
        "",
    ]
    lines += [f"- `{cell(t)}`: {inline(why)}" for t, why in result.flaky_tests.items()]
    return "\n".join(lines)


def _reverted_and_refused(stories: Sequence[StoryRecord]) -> str:
    lines = []
    for s in stories:
        for a in s.attempts:
            label = f"{cell(s.id)} attempt {a.attempt}"
            lines += [f"- {label}: reverted write to `{cell(p)}`" for p in a.forbidden_writes]
            lines += [f"- {label}: refused tool call `{cell(t)}`" for t in a.refused_tools]
            lines += [
                f"- {label}: {cell(s.id)} changed `{cell(p)}` while implementing: reverted"
                for p in a.tests_reverted
            ]
        if s.frozen is not None:
            lines += [
                f"- {cell(s.id)} tests call: reverted `{cell(p)}` (not on the test side)"
                for p in s.frozen.reverted
            ]
    if not lines:
        return ""
    return "### Reverted writes and refused tool calls\n\n" + "\n".join(lines)


def _checklist(stories: Sequence[StoryRecord]) -> str:
    lines = [
        "### Acceptance checklist",
        "",
        "For the reviewer: the checks above ran the tests; "
        "these are the criteria the plan promised.",
    ]
    for s in stories:
        lines += ["", f"**{cell(s.id)}: {cell(s.title)}** ({s.state})"]
        lines += [f"- [ ] {inline(c)}" for c in s.acceptance_criteria]
    return "\n".join(lines)


def _time_and_cost(result: RunResult) -> str:
    attempts = sum(len(s.attempts) for s in result.stories)
    minutes, seconds = divmod(int(result.duration_s), 60)
    return (
        f"### Time and cost\n\n{minutes}m {seconds:02d}s, {plural(attempts, 'agent attempt')}, "
        f"${result.cost_usd:.2f} reported by the agent."
    )
