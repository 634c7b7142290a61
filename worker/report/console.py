"""The console reporter: one line per event, for `reqdrive run` in a terminal."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from worker.model.gates import GateResult, GateSpec
from worker.model.state import AttemptRecord, RunResult, RunStep, StoryRecord
from worker.report.live_line import LiveLine
from worker.report.story_states import (
    STATE_ICONS,
    attempt_outcome,
    count_stories,
    frozen_note,
    gate_summary,
    plural,
    state_label,
    story_counts,
)

# What each step does, said when it starts (the workspace is made before the run starts).
STEP_WORDS = {
    RunStep.BASELINE: "measuring the base commit",
    RunStep.PLAN: "planning the stories",
    RunStep.IMPLEMENT: "implementing the stories",
    RunStep.VERIFY: "checking the final branch",
    RunStep.DELIVER: "writing the pull request body",
}
# The runs that judge a story's attempt besides its own gate run ("iteration-3").
GATE_RUN_SUFFIXES = {
    ".parent": ", its new tests on the parent (must fail)",
    ".restored": ", the checks as they were before its change",
    "-tests": ", its tests before its code (new ones must fail)",
    # Its new tests at its own commit, run exactly as the parent proof ran them (selected.py).
    ".alike": ", its new tests run as the proof ran them",
    # A test that passed before and failed with the story, run again (flaky.py).
    ".parent.rerun1": ", a failing test run again without its change (1 of 2)",
    ".parent.rerun2": ", a failing test run again without its change (2 of 2)",
    ".rerun1": ", a failing test run again with its change (1 of 2)",
    ".rerun2": ", a failing test run again with its change (2 of 2)",
}
# Results a run did not measure again, told apart from a run of the checks.
NOT_RUN_AGAIN = {
    "baseline.cached": "baseline (from the cache: an earlier run measured this tree)",
    "verification.reused": "verify (not run again: this commit was judged with these checks)",
}
COMMAND_CHARS = 40


def elapsed(seconds: float) -> str:
    """ "0:07", "12:30", "1:02:03": time since the run started, as a stopwatch shows it."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def gate_line(result: GateResult) -> str:
    """ "tests: 3 tests, 1 failing", "lint passed", "tests timed out": one gate run's result."""
    if result.timed_out:
        return f"{result.name} timed out"
    failing = result.failed_tests
    if result.tests is not None and failing is not None:
        return f"{result.name}: {plural(len(result.tests), 'test')}, {len(failing)} failing"
    verdict = "passed" if result.passed else f"FAILED (exit {result.exit_code})"
    return f"{result.name} {verdict}"


def _command(gate: GateSpec) -> str:
    text = " ".join(gate.command.split())
    return text if len(text) <= COMMAND_CHARS else text[: COMMAND_CHARS - 1] + "…"


class ConsoleReporter:
    """One line per event, as it happens, for `reqdrive run` in a terminal."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        plan_only: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream or sys.stdout
        # `reqdrive plan`: the engine stops itself after the plan, which is no cancellation.
        self._plan_only = plan_only
        self._clock = clock
        self._started = clock()
        self._attempt = ""  # "US-001 attempt 2": whose agent call and gate runs come next
        # A terminal sees the seconds of what runs now count up; a file or pipe plain lines.
        self._live = LiveLine(self._stream, clock=clock) if self._stream.isatty() else None

    def _say(self, text: str) -> None:
        if self._live is not None:
            self._live.say(text)
        else:
            print(text, file=self._stream, flush=True)

    def _timed(self, text: str, *, running: bool = False) -> None:
        line = f"[{elapsed(self._clock() - self._started)}] {text}"
        if running and self._live is not None:
            self._live.hold(line)
        else:
            self._say(line)

    def _gate_run(self, label: str) -> str:
        """ "baseline", "verify", "US-001 attempt 2, its new tests on the parent commit"."""
        if label in {"baseline", "verification"}:
            return "baseline" if label == "baseline" else "verify"
        if label in NOT_RUN_AGAIN:
            return NOT_RUN_AGAIN[label]
        for suffix, words in GATE_RUN_SUFFIXES.items():
            if label.endswith(suffix):
                return self._attempt + words
        return self._attempt or label

    def agent_started(self, label: str) -> None:
        self._timed(f"{self._agent_call(label)}: agent working …", running=True)

    def agent_finished(self, label: str, seconds: float, ended: str) -> None:
        self._timed(f"{self._agent_call(label)}: agent done, {ended} ({seconds:.1f} s)")

    def _agent_call(self, label: str) -> str:
        if label.startswith("plan-"):
            return f"plan (attempt {label.removeprefix('plan-')})"
        if label.endswith("-tests"):  # a story's tests call, before its implement call
            return f"{self._attempt}, its tests call" if self._attempt else f"iteration {label}"
        return self._attempt or f"iteration {label}"

    def gates_started(self, label: str, gates: Sequence[GateSpec]) -> None:
        running = ", ".join(f"{g.name} ({_command(g)})" for g in gates)
        self._timed(f"{self._gate_run(label)}: running {running} …", running=True)

    def gates_finished(self, label: str, results: Sequence[GateResult], seconds: float) -> None:
        said = "; ".join(gate_line(r) for r in results) or "no check ran"
        self._timed(f"{self._gate_run(label)}: {said} ({seconds:.1f} s)")

    def run_started(self, run_id: str, source: str, branch: str) -> None:
        self._say(f"reqdrive run {run_id}: {source} → {branch}")

    def step_started(self, step: RunStep) -> None:
        if step in STEP_WORDS:
            self._timed(f"{step}: {STEP_WORDS[step]}")

    def branch_pushed(self, branch: str, sha: str) -> None:
        self._say(f"  pushed {branch} at {sha[:12]}")

    def run_failed(self, step: RunStep, message: str, *, error_type: str = "") -> None:
        self._say(f"failed at the {step} step: {message}")

    def plan_ready(self, stories: Sequence[StoryRecord]) -> None:
        self._say(f"plan: {count_stories(len(stories))}")
        for story in sorted(stories, key=lambda s: (s.priority, s.id)):
            self._say(
                f"  {STATE_ICONS[story.state]} {story.id} (priority {story.priority}) {story.title}"
            )

    def story_started(self, story: StoryRecord, attempt: int, iteration: int) -> None:
        self._attempt = f"{story.id} attempt {attempt}"
        self._say(f"→ {story.id} attempt {attempt} (iteration {iteration}): {story.title}")

    def story_finished(self, story: StoryRecord, attempt: AttemptRecord) -> None:
        gates = gate_summary(attempt)
        detail = f" [{gates}]" if gates else ""
        frozen = f"; {frozen_note(story)}" if frozen_note(story) else ""
        self._say(
            f"  {story.id} attempt {attempt.attempt} {attempt_outcome(attempt)}{detail} "
            f"→ story {state_label(story)} ({attempt.duration_s:.1f}s){frozen}"
        )

    def run_finished(self, result: RunResult) -> None:
        if self._plan_only:
            self._say(f"planned: {count_stories(len(result.stories))}; no story was run")
            return
        verdict = "ready for review" if result.ready else f"draft: {result.draft_reason}"
        if result.failing_on_base:
            debt = ", ".join(result.failing_on_base)
            verdict += f"; fails on the base too (not this PR's doing): {debt}"
        self._say(
            f"done: {story_counts(result.stories)}; stopped because {result.stop_reason}; {verdict}"
        )
        self._say(
            f"  branch {result.branch} at {result.head_sha[:12]}; PR body in {result.run_dir}/pr.md"
        )
