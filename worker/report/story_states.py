"""How a story's state reads everywhere (PR body, progress comment, console): icon, order, count."""

from __future__ import annotations

from collections.abc import Sequence

from worker.model.state import StoryRecord, StoryState

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
