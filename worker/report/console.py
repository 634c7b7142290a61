"""The console reporter: one line per event, for `reqdrive run` in a terminal."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from worker.model.state import AttemptRecord, RunResult, RunStep, StoryRecord
from worker.report.story_states import (
    STATE_ICONS,
    attempt_outcome,
    count_stories,
    gate_summary,
    story_counts,
)


class ConsoleReporter:
    """One line per event, as it happens, for `reqdrive run` in a terminal."""

    def __init__(self, stream: TextIO | None = None, *, plan_only: bool = False) -> None:
        self._stream = stream or sys.stdout
        # `reqdrive plan`: the engine stops itself after the plan, which is no cancellation.
        self._plan_only = plan_only

    def _say(self, text: str) -> None:
        print(text, file=self._stream, flush=True)

    def run_started(self, run_id: str, source: str, branch: str) -> None:
        self._say(f"reqdrive run {run_id}: {source} → {branch}")

    def step_started(self, step: RunStep) -> None:
        pass  # the console shows the plan and the stories themselves, not each step

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
        self._say(f"→ {story.id} attempt {attempt} (iteration {iteration}): {story.title}")

    def story_finished(self, story: StoryRecord, attempt: AttemptRecord) -> None:
        gates = gate_summary(attempt)
        detail = f" [{gates}]" if gates else ""
        self._say(
            f"  {story.id} attempt {attempt.attempt} {attempt_outcome(attempt)}{detail} "
            f"→ story {story.state} ({attempt.duration_s:.1f}s)"
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
