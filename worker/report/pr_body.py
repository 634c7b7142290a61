"""Where the pull request body is written: a pure render of the run's result to Markdown."""

from __future__ import annotations

from collections.abc import Sequence

from worker.model.control_chars import escape_control
from worker.model.gates import GateResult
from worker.model.state import AttemptOutcome, RunResult, StoryRecord, StoryState, TestCheck
from worker.report.inert_text import neutralize
from worker.report.story_states import (
    STATE_ICONS,
    attempt_outcome,
    frozen_note,
    plural,
    story_counts,
)

RUN_MARKER = "<!-- reqdrive:run {run_id} -->"


def render_pr_body(result: RunResult, *, closes_issue: int | None = None) -> str:
    """The pull request body, from the run's result alone (pure)."""
    parts = [
        _summary(result),
        *([f"Closes #{closes_issue}"] if closes_issue is not None else []),
        _stories_table(result.stories),
        _frozen_tests(result.stories),
        _story_details(result.stories),
        _gates_table(result.baseline_gates, result.final_gates),
        _where_results_came_from(result),
        _baseline_section(result),
        _failing_on_base(result),
        _still_failing(result),
        _flaky(result),
        _reverted_and_refused(result.stories),
        _checklist(result.stories),
        _time_and_cost(result),
        RUN_MARKER.format(run_id=_cell(result.run_id)),
    ]
    return "\n\n".join(p for p in parts if p) + "\n"


def _source(source: str) -> str:
    # A requirement given as text on the command line has no file to name.
    return "the requirement given as text" if source == "text" else f"`{_inline(source)}`"


def _summary(result: RunResult) -> str:
    lines = [
        f"## {_inline(result.project or result.requirement_source)}",
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
            names = ", ".join(f"`{_cell(name)}`" for name in result.failing_on_base)
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
        lines.append(f"\n**Draft**: {_inline(result.draft_reason or 'not every check passed')}.")
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
        "| | Story | Title | State | Attempts | Tests | Commit |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in stories:
        commit = f"`{s.commit[:12]}`" if s.commit else "—"
        last = s.attempts[-1].reason if s.attempts and s.state is not StoryState.PASSED else ""
        state = f"{s.state}" + (f" ({_cell(last)})" if last else "")
        if s.attempts and s.attempts[-1].outcome is AttemptOutcome.NOTHING_TO_CHANGE:
            state = str(AttemptOutcome.NOTHING_TO_CHANGE)
        rows.append(
            f"| {STATE_ICONS[s.state]} | {_cell(s.id)} | {_cell(s.title)} | {state} "
            f"| {len(s.attempts)} | {_tests_cell(s)} | {commit} |"
        )
    return "\n".join(rows)


def _frozen_tests(stories: Sequence[StoryRecord]) -> str:
    """Per story: the commit its tests were frozen in before its code, or why they were not;
    an existing test it changed on its plan's word is a row of its own."""
    rows = [
        "### Frozen tests",
        "",
        "Each story's tests were written, proven failing without its code and committed before "
        "its code; every check ran on them as committed.",
        "",
        "| Story | Frozen tests | Commit | Note |",
        "| --- | --- | --- | --- |",
    ]
    for s in stories:
        if not s.attempts:
            continue
        frozen, note = s.frozen, _cell(frozen_note(s))
        if frozen is None:
            refused = s.attempts[-1].outcome is AttemptOutcome.TESTS_REFUSED
            said = (
                "its tests call froze nothing" if refused else "the story's tests were not frozen"
            )
            rows.append(f"| {_cell(s.id)} | {said} | — | {note or '—'} |")
            continue
        tests = ", ".join(f"`{_cell(t)}`" for t in frozen.tests) or "no new tests"
        commit = f"`{frozen.commit[:12]}`" if frozen.commit else "—"
        rows.append(f"| {_cell(s.id)} | {tests} | {commit} | {note or '—'} |")
        reasons = {c.path: c.reason for c in s.changes_tests}
        for test in frozen.changed_passing:
            why = "; ".join(f"{p}: {r}" for p, r in reasons.items())
            rows.append(
                f"| {_cell(s.id)} | changed a passing test: `{_cell(test)}` | "
                f"{commit} | {_cell(why)}; needs review |"
            )
    if len(rows) == 6:
        return ""
    if all(s.frozen is None for s in stories if s.attempts):
        rows[2] = (
            "The stories' tests were not frozen (`tests: together`): each story's tests were "
            "written in the same agent call as its code."
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
        tried = len(s.attempts)
        lines += ["", f"**{_cell(s.id)}** — {s.state} after {tried} attempt{'s' * (tried != 1)}"]
        lines += _test_lines(s)
        for attempt in s.attempts:
            if attempt.outcome is not AttemptOutcome.PASSED or attempt.reason:
                lines.append(f"- attempt {attempt.attempt}: {_inline(attempt_outcome(attempt))}")
            if attempt.gate_changes:
                lines.append(
                    f"- attempt {attempt.attempt} changed what a gate runs: "
                    + ", ".join(f"`{_cell(p)}`" for p in attempt.gate_changes)
                )
    return "\n".join(lines)


def _test_lines(story: StoryRecord) -> list[str]:
    checks = _last_checks(story)
    owned = [c for c in checks if c.owned]
    lines = []
    for c in owned:
        parent = f"; without the story's change: {c.at_parent}" if c.added else ""
        kind = "added" if c.added else "owned"
        problem = f" — {_inline(c.problem)}" if c.problem else ""
        lines.append(f"- `{_cell(c.id)}` ({kind}): {c.before} → {c.after}{parent}{problem}")
    if not owned and story.tests:
        lines += [f"- `{_cell(t)}` (owned): not judged yet" for t in story.tests]
    broken = [c for c in checks if not c.owned and c.problem]
    lines += [f"- `{_cell(c.id)}`: {c.before} → {c.after} — {_inline(c.problem)}" for c in broken]
    lines += [
        f"- `{_cell(c.id)}`: flaky, kept out of the verdict ({_inline(c.reruns)})"
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
            f"| {_cell(gate.name)} | {_gate_state(before.get(gate.name))} "
            f"| {_gate_state(gate)} | `{_cell(gate.command)}` |"
        )
    return "\n".join(rows)


def _where_results_came_from(result: RunResult) -> str:
    """Results not measured again, and whose they are."""
    lines = []
    if result.baseline_cached:
        lines.append(
            "The base commit's results come from an earlier run on the same tree with the same "
            f"checks and configuration (cache entry {_inline(result.baseline_cached)})."
        )
    if result.final_gates_from:
        lines.append(
            "The final checks were not run again: this branch's head was already judged with "
            f"the same checks, in {_inline(result.final_gates_from)}."
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
        lines += [f"- `{_cell(t)}`" for t in result.fixed_tests]
    if result.remaining_tests:
        lines += ["", f"Still failing ({len(result.remaining_tests)}):"]
        lines += [f"- `{_cell(t)}`" for t in result.remaining_tests]
    return "\n".join(lines)


def _failing_on_base(result: RunResult) -> str:
    if not result.failing_on_base:
        return ""
    lines = ["### Fails on the base too (not this PR's doing)", ""]
    lines += [f"- `{_cell(name)}`: {_inline(why)}" for name, why in result.failing_on_base.items()]
    return "\n".join(lines)


def _still_failing(result: RunResult) -> str:
    if not result.per_test_results:
        return ""
    if not result.still_failing:
        return "### Tests still failing\n\nNone: every test the checks ran passes on this branch."
    lines = ["### Tests still failing", ""]
    lines += [f"- `{_cell(t)}`: {_inline(why)}" for t, why in result.still_failing.items()]
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
    lines += [f"- `{_cell(t)}`: {_inline(why)}" for t, why in result.flaky_tests.items()]
    return "\n".join(lines)


def _reverted_and_refused(stories: Sequence[StoryRecord]) -> str:
    lines = []
    for s in stories:
        for a in s.attempts:
            label = f"{_cell(s.id)} attempt {a.attempt}"
            lines += [f"- {label}: reverted write to `{_cell(p)}`" for p in a.forbidden_writes]
            lines += [f"- {label}: refused tool call `{_cell(t)}`" for t in a.refused_tools]
            lines += [
                f"- {label}: {_cell(s.id)} changed `{_cell(p)}` while implementing: reverted"
                for p in a.tests_reverted
            ]
        if s.frozen is not None:
            lines += [
                f"- {_cell(s.id)} tests call: reverted `{_cell(p)}` (not on the test side)"
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
        lines += ["", f"**{_cell(s.id)}: {_cell(s.title)}** ({s.state})"]
        lines += [f"- [ ] {_inline(c)}" for c in s.acceptance_criteria]
    return "\n".join(lines)


def _time_and_cost(result: RunResult) -> str:
    attempts = sum(len(s.attempts) for s in result.stories)
    minutes, seconds = divmod(int(result.duration_s), 60)
    return (
        f"### Time and cost\n\n{minutes}m {seconds:02d}s, {plural(attempts, 'agent attempt')}, "
        f"${result.cost_usd:.2f} reported by the agent."
    )


def _inline(text: str) -> str:
    # Agent- and user-written text must not close our HTML comment marker or fake a new one,
    # close other issues on merge or ping people.
    text = text.replace("<!--", "&lt;!--").replace("-->", "--&gt;").replace("\n", " ")
    # Nor carry control characters (a file name may hold any): shown escaped.
    return neutralize(escape_control(text)).strip()


def _cell(text: str) -> str:
    return _inline(text).replace("|", "\\|").replace("`", "'")
