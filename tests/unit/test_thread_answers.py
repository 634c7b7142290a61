"""What a feedback story's answer says: never "done" for a story a person must check."""

from __future__ import annotations

from bot.github.thread_answers import answer_text
from worker.model.feedback import SourceKind, StorySource
from worker.model.state import AttemptOutcome, AttemptRecord, StoryRecord, StoryState

COMMIT = "abcdef1234567890" * 2 + "abcdefgh"
UNPROVEN = (
    "no test of its own shows the review comment addressed (none failed without its change "
    "and passes with it): a person reads the change"
)


def story(kind: SourceKind, state: StoryState) -> tuple[StoryRecord, AttemptRecord]:
    attempt = AttemptRecord(
        iteration=2, attempt=1, outcome=AttemptOutcome(str(state)), reason=UNPROVEN, commit=COMMIT
    )
    record = StoryRecord(
        id="FB-001",
        title="Answer the review thread on app.py line 2",
        description="d",
        acceptance_criteria=["c"],
        priority=2,
        state=state,
        commit=COMMIT,
        attempts=[attempt],
        source=StorySource(kind=kind, key="k", thread_id="T1", reply_to=5, path="app.py", line=2),
    )
    return record, attempt


def test_a_thread_whose_story_needs_review_is_asked_to_check_the_change_not_told_it_is_done() -> (
    None
):
    text = answer_text(*story(SourceKind.THREAD, StoryState.NEEDS_REVIEW))
    assert text.startswith(f"⚠️ **`FB-001` needs review** (change {COMMIT[:12]}): {UNPROVEN}")
    assert f"please check the change (commit {COMMIT[:12]}) yourself" in text
    assert "This thread stays open" in text
    assert "passed" not in text and "Resolving" not in text


def test_a_fix_comment_whose_story_needs_review_is_answered_without_a_thread() -> None:
    text = answer_text(*story(SourceKind.COMMENT, StoryState.NEEDS_REVIEW))
    assert "needs review" in text and f"commit {COMMIT[:12]}" in text
    assert "thread" not in text


def test_a_passed_thread_is_still_said_resolved() -> None:
    text = answer_text(*story(SourceKind.THREAD, StoryState.PASSED))
    assert "**`FB-001` passed**" in text and "Resolving this thread." in text
