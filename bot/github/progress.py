"""The progress comment: a run's status, its stories' checklist and what a person can do next."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from worker.model.state import RunResult, StoryRecord, StoryState
from worker.report.inert_text import neutralize
from worker.report.story_states import (
    STATE_ICONS,
    attempt_outcome,
    frozen_note,
    last_review,
    plural,
    review_cell,
    state_label,
    tests_line,
)

REVIEW_LINES = 5  # findings and extra behaviours shown per story; the PR lists them all

PROGRESS_MARKER = "<!-- reqdrive:progress {run_id} -->"


@dataclass
class Progress:
    """What the comment and the check run show; rendered as a whole every time."""

    source: str
    branch: str
    stories: list[StoryRecord] = field(default_factory=list)
    status: str = "⏳ Starting"
    current: str | None = None
    ending: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def checklist(self) -> str:
        if not self.stories:
            return "_Planning the requirement into stories…_"
        return "\n".join(_story_line(s, running=s.id == self.current) for s in self.stories)

    def render(self, run_id: str) -> str:
        parts = [
            f"### reqdrive: `{inline_code(self.source)}` → `{inline_code(self.branch)}`",
            self.status,
            *self.notes,
            self.checklist(),
            *self.ending,
        ]
        # Story ids, titles and reasons are the agent's words: no mention or closing keyword
        # of theirs may act (each part is also made inert where it is put together).
        text = [neutralize(p) for p in parts if p]
        return "\n\n".join([*text, PROGRESS_MARKER.format(run_id=run_id)]) + "\n"


def _story_line(story: StoryRecord, *, running: bool) -> str:
    done = story.state in (StoryState.PASSED, StoryState.UNVERIFIED)
    seconds = sum(a.duration_s for a in story.attempts)
    cost = sum(a.cost_usd or 0.0 for a in story.attempts)
    state = "running" if running else state_label(story)
    facts = f"{plural(len(story.attempts), 'attempt')}, {seconds:.0f}s, ${cost:.2f}"
    line = f"- [{'x' if done else ' '}] {STATE_ICONS[story.state]} **{inline_code(story.id)}** "
    line += f"{inline_text(story.title)}: {state} ({facts})"
    if story.attempts:
        review = f"; blind review: {inline_text(review_cell(story))}"
        line += f"\n  - tests: {tests_line(story)}{review if last_review(story) else ''}"
        line += _review_details(story)
    if note := frozen_note(story):
        line += f"\n  - {inline_text(note)}"
    if story.attempts and not done:
        last = story.attempts[-1]
        failing = [t for g in last.gates for t in (g.failed_tests or [])]
        why = inline_text(attempt_outcome(last))
        line += f"\n  - last attempt: {why[:300]}"
        if failing:
            line += "\n  - failing: " + ", ".join(f"`{inline_code(t)}`" for t in failing[:10])
    flaky = [c.id for c in story.attempts[-1].tests if c.flaky] if story.attempts else []
    if flaky:
        shown = ", ".join(f"`{inline_code(t)}`" for t in flaky[:10])
        line += f"\n  - flaky, kept out of the verdict: {shown}"
    return line


def _review_details(story: StoryRecord) -> str:
    """The review's findings and the behaviour it found unasked, a model's opinion."""
    review = last_review(story)
    if review is None:
        return ""
    lines = [f"review finding: {f}" for f in review.finding_lines()]
    lines += [f"not asked for (review): {e}" for e in review.extra_behaviour]
    return "".join(f"\n  - {inline_text(text)[:300]}" for text in lines[:REVIEW_LINES])


def inline_text(text: str) -> str:
    """Agent- or user-written text on one line: it cannot close or fake our hidden marker,
    and GitHub does not act on its mentions or closing keywords."""
    return neutralize(" ".join(text.replace("<!--", "&lt;!--").replace("-->", "--&gt;").split()))


def inline_code(text: str) -> str:
    return inline_text(text).replace("`", "'")


def next_steps(stories: Sequence[StoryRecord]) -> str:
    """What a person can do now, as commands they can paste."""
    failed = [s.id for s in stories if s.state is StoryState.FAILED]
    pending = [s.id for s in stories if s.state is StoryState.PENDING]
    if not failed and not pending:
        return ""
    if pending and not failed:
        # Stopped before them (its budget, a cancel, maxIterations): a retry resets stories
        # that ended, so it would find nothing to do; the run takes up where it stopped.
        return (
            f"**Next:** comment `/reqdrive run` to go on from {pending[0]}, where the run stopped."
        )
    first = (failed or pending)[0]
    return (
        f"**Next:** comment `/reqdrive retry {first}` to run that story again, or "
        "`/reqdrive retry` for every story that did not pass."
    )


def money_line(result: RunResult) -> str:
    minutes, seconds = divmod(int(result.duration_s), 60)
    return f"Time {minutes}m {seconds:02d}s, cost ${result.cost_usd:.2f}."
