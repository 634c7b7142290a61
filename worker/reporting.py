"""Progress reporting behind one protocol, a console reporter, and the PR body render."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Protocol, TextIO

from worker.gates import GateResult
from worker.state import AttemptRecord, RunResult, StoryRecord, StoryState

RUN_MARKER = "<!-- reqdrive:run {run_id} -->"
STATE_ICONS = {
    StoryState.PASSED: "✅",
    StoryState.FAILED: "❌",
    StoryState.UNVERIFIED: "⚠️",
    StoryState.PENDING: "⏳",
}


class Reporter(Protocol):
    """Receives a run's progress; GitHub and the console are two implementations."""

    def run_started(self, run_id: str, source: str, branch: str) -> None: ...

    def plan_ready(self, stories: Sequence[StoryRecord]) -> None: ...

    def story_started(self, story: StoryRecord, attempt: int, iteration: int) -> None: ...

    def story_finished(self, story: StoryRecord, attempt: AttemptRecord) -> None: ...

    def run_finished(self, result: RunResult) -> None: ...


class NullReporter:
    """Reports nowhere (jobs that only need the result, benchmarks)."""

    def run_started(self, run_id: str, source: str, branch: str) -> None:
        pass

    def plan_ready(self, stories: Sequence[StoryRecord]) -> None:
        pass

    def story_started(self, story: StoryRecord, attempt: int, iteration: int) -> None:
        pass

    def story_finished(self, story: StoryRecord, attempt: AttemptRecord) -> None:
        pass

    def run_finished(self, result: RunResult) -> None:
        pass


class ConsoleReporter:
    """One line per event, as it happens, for `reqdrive run` in a terminal."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream or sys.stdout

    def _say(self, text: str) -> None:
        print(text, file=self._stream, flush=True)

    def run_started(self, run_id: str, source: str, branch: str) -> None:
        self._say(f"reqdrive run {run_id}: {source} → {branch}")

    def plan_ready(self, stories: Sequence[StoryRecord]) -> None:
        self._say(f"plan: {len(stories)} stories")
        for story in sorted(stories, key=lambda s: (s.priority, s.id)):
            self._say(
                f"  {STATE_ICONS[story.state]} {story.id} (priority {story.priority}) {story.title}"
            )

    def story_started(self, story: StoryRecord, attempt: int, iteration: int) -> None:
        self._say(f"→ {story.id} attempt {attempt} (iteration {iteration}): {story.title}")

    def story_finished(self, story: StoryRecord, attempt: AttemptRecord) -> None:
        gates = ", ".join(f"{g.name} {'ok' if g.passed else 'FAILED'}" for g in attempt.gates)
        detail = f" [{gates}]" if gates else ""
        why = f": {attempt.reason}" if attempt.reason else ""
        self._say(
            f"  {story.id} attempt {attempt.attempt} {attempt.outcome}{why}{detail} "
            f"→ story {story.state} ({attempt.duration_s:.1f}s)"
        )

    def run_finished(self, result: RunResult) -> None:
        passed = result.count(StoryState.PASSED)
        verdict = "ready for review" if result.ready else f"draft: {result.draft_reason}"
        self._say(
            f"done: {passed}/{len(result.stories)} stories passed, "
            f"stopped because {result.stop_reason}; {verdict}"
        )
        self._say(
            f"  branch {result.branch} at {result.head_sha[:12]}; PR body in {result.run_dir}/pr.md"
        )


def render_pr_body(result: RunResult, *, closes_issue: int | None = None) -> str:
    """The pull request body, from the run's result alone (pure)."""
    parts = [
        _summary(result),
        *([f"Closes #{closes_issue}"] if closes_issue is not None else []),
        _stories_table(result.stories),
        _gates_table(result.baseline_gates, result.final_gates),
        _baseline_section(result),
        _checklist(result.stories),
        _time_and_cost(result),
        RUN_MARKER.format(run_id=_cell(result.run_id)),
    ]
    return "\n\n".join(p for p in parts if p) + "\n"


def _summary(result: RunResult) -> str:
    total = len(result.stories)
    passed = result.count(StoryState.PASSED)
    lines = [
        f"## {_inline(result.project or result.requirement_source)}",
        "",
        f"reqdrive implemented **{passed} of {total}** stories of "
        f"`{_inline(result.requirement_source)}` on `{result.branch}` "
        f"(base `{result.base_ref}` at `{result.base_sha[:12]}`). "
        "Every verdict below comes from the worker running the repository's own checks, "
        "not from the agent.",
    ]
    if result.ready:
        lines.append("\n**Ready for review**: every story passed and the final checks are green.")
    else:
        lines.append(f"\n**Draft**: {_inline(result.draft_reason or 'not every check passed')}.")
    if result.stop_reason is not None:
        lines.append(f"Stopped because: {result.stop_reason}.")
    return "\n".join(lines)


def _stories_table(stories: Sequence[StoryRecord]) -> str:
    rows = [
        "### Stories",
        "",
        "| | Story | Title | State | Attempts | Commit |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for s in stories:
        commit = f"`{s.commit[:12]}`" if s.commit else "—"
        last = s.attempts[-1].reason if s.attempts and s.state is not StoryState.PASSED else ""
        state = f"{s.state}" + (f" ({_cell(last)})" if last else "")
        rows.append(
            f"| {STATE_ICONS[s.state]} | {_cell(s.id)} | {_cell(s.title)} | {state} "
            f"| {len(s.attempts)} | {commit} |"
        )
    return "\n".join(rows)


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


def _gate_state(gate: GateResult | None) -> str:
    if gate is None:
        return "not run"
    if gate.timed_out:
        return "⏱️ timed out"
    if gate.passed:
        return "✅ pass"
    failed = "" if gate.failed_tests is None else f" ({len(gate.failed_tests)} tests)"
    return f"❌ fail{failed}"


def _baseline_section(result: RunResult) -> str:
    if not result.fixed_tests and not result.remaining_tests:
        return ""
    lines = [
        "### Failures on the base commit",
        "",
        "The checks already failed before this run; stories were judged by the failures "
        "they added, not by a green run.",
    ]
    if result.fixed_tests:
        lines += ["", f"Fixed by this branch ({len(result.fixed_tests)}):"]
        lines += [f"- `{_cell(t)}`" for t in result.fixed_tests]
    if result.remaining_tests:
        lines += ["", f"Still failing ({len(result.remaining_tests)}):"]
        lines += [f"- `{_cell(t)}`" for t in result.remaining_tests]
    return "\n".join(lines)


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
        f"### Time and cost\n\n{minutes}m {seconds:02d}s, {attempts} agent attempts, "
        f"${result.cost_usd:.2f} reported by the agent."
    )


def _inline(text: str) -> str:
    # Agent- and user-written text must not close our HTML comment marker or fake a new one.
    return text.replace("<!--", "&lt;!--").replace("-->", "--&gt;").replace("\n", " ").strip()


def _cell(text: str) -> str:
    return _inline(text).replace("|", "\\|").replace("`", "'")
