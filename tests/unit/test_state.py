"""Run state: the story records built on the plan, the next story, and older checkpoints."""

from __future__ import annotations

import shutil
from pathlib import Path

from worker.model.prd import Prd, parse_prd
from worker.model.state import (
    AttemptOutcome,
    AttemptRecord,
    Checkpoint,
    StoryRecord,
    StoryState,
    select_next_story,
)
from worker.run.checkpoint_file import FileCheckpointStore

# Written by the code before the story record was built on the plan's story: the stored
# PRD an untyped dict, each story's description and notes only there.
OLD_CHECKPOINT = Path(__file__).parents[1] / "fixtures/checkpoints/before-story-records.json"


def record(story_id: str, priority: int, **verdict: object) -> StoryRecord:
    return StoryRecord.model_validate(
        {"id": story_id, "title": "T", "acceptanceCriteria": ["ok"], "priority": priority} | verdict
    )


def attempt(outcome: AttemptOutcome = AttemptOutcome.GATES_FAILED) -> AttemptRecord:
    return AttemptRecord(iteration=1, attempt=1, outcome=outcome)


def test_a_checkpoint_in_the_older_shape_loads_with_its_plan_typed_and_stories_whole(
    tmp_path: Path,
) -> None:
    (tmp_path / "req-7-abc").mkdir()
    shutil.copy(OLD_CHECKPOINT, tmp_path / "req-7-abc" / "checkpoint.json")
    cp = FileCheckpointStore(tmp_path).load("req-7-abc")
    assert cp is not None and isinstance(cp.prd, Prd)
    assert (cp.prd.project, cp.prd.source_req) == ("csv-export", "REQ-7.md")
    first, second = cp.stories
    assert (first.state, first.commit, len(first.attempts)) == (StoryState.PASSED, "b" * 40, 1)
    assert first.description == "As a user I export rows"
    assert first.notes == "use the csv module"
    assert first.tests == ["tests/test_x.py::test_export"]
    assert (second.description, second.acceptance_criteria) == (
        "A header row",
        ["first line names columns"],
    )
    # Resumed, the run goes on with the story it had not done yet.
    assert select_next_story(cp.stories, max_story_retries=3) is second


def test_a_checkpoint_saved_again_loads_the_same(tmp_path: Path) -> None:
    (tmp_path / "req-7-abc").mkdir()
    shutil.copy(OLD_CHECKPOINT, tmp_path / "req-7-abc" / "checkpoint.json")
    store = FileCheckpointStore(tmp_path)
    cp = store.load("req-7-abc")
    assert cp is not None
    store.save(cp)
    again = store.load("req-7-abc")
    assert again is not None
    assert again.prd == cp.prd
    assert again.stories == cp.stories


def test_a_record_is_the_plans_story_with_no_verdict_yet() -> None:
    prd = parse_prd(
        '{"userStories": [{"id": "US-1", "title": "T", "description": "d", "notes": "n", '
        '"acceptanceCriteria": ["ok"], "priority": 1, "passes": true, "attempts": 7}]}'
    )
    made = StoryRecord.model_validate(prd.user_stories[0].model_dump())
    assert (made.id, made.description, made.notes) == ("US-1", "d", "n")
    # What the agent wrote for the worker's own fields is not taken.
    assert (made.state, made.attempts) == (StoryState.PENDING, [])


def test_the_next_story_is_the_lowest_priority_then_the_lowest_id() -> None:
    stories = [record("US-003", 2), record("US-002", 1), record("US-001", 1)]
    chosen = select_next_story(stories, max_story_retries=3)
    assert chosen is not None and chosen.id == "US-001"
    # The order stories are listed in does not matter.
    assert select_next_story(list(reversed(stories)), max_story_retries=3) == chosen


def test_passed_settled_and_exhausted_stories_are_never_chosen() -> None:
    stories = [
        record("US-001", 1, state=StoryState.PASSED),
        record("US-002", 1, attempts=[attempt()] * 3),
        record("US-003", 2, state=StoryState.FAILED),
        record("US-004", 2, state=StoryState.UNVERIFIED),
        record("US-005", 2, state=StoryState.NEEDS_REVIEW),
        record("US-006", 3, attempts=[attempt()]),
    ]
    chosen = select_next_story(stories, max_story_retries=3)
    assert chosen is not None and chosen.id == "US-006"
    assert select_next_story(stories[:5], max_story_retries=3) is None


def test_a_checkpoint_from_before_frozen_tests_loads_with_none_frozen() -> None:
    checkpoint = Checkpoint.model_validate_json(OLD_CHECKPOINT.read_text())
    assert checkpoint.stories and all(s.frozen is None for s in checkpoint.stories)
    assert all(
        a.frozen_commit is None and a.tests_reverted == []
        for s in checkpoint.stories
        for a in s.attempts
    )
