"""What `reqdrive plan` prints: the stories, the tests each owns, and the failing tests no
story claims."""

from __future__ import annotations

import shlex
from pathlib import Path

from worker.model.prd import Prd
from worker.model.state import RunResult
from worker.report.story_states import count_stories, plural


def print_plan(prd_path: Path, result: RunResult, source: str, next_command: str) -> None:
    """The plan in prd.json as a person reads it, then the command that goes on from it."""
    prd = Prd.model_validate_json(prd_path.read_text())
    print(f"plan for {source}: {count_stories(len(prd.user_stories))}")
    for story in sorted(prd.user_stories, key=lambda s: (s.priority, s.id)):
        print(f"{story.id} (priority {story.priority}) {story.title}")
        for criterion in story.acceptance_criteria:
            print(f"  - {criterion}")
        owned = ", ".join(story.tests) if story.tests else "none (judged on the others passing)"
        print(f"  tests: {owned}")
    if result.unclaimed_tests:
        print(
            f"no story claims {plural(len(result.unclaimed_tests), 'test')} failing on the base; "
            "they stay final checks, and the run ends a draft while they fail:"
        )
        print("\n".join(f"  {test_id}" for test_id in result.unclaimed_tests))
    print(f"prd.json: {prd_path}")
    print(f"next: {next_command} (or edit prd.json and add --plan FILE)")


def run_command(requirement: str, run_id: str) -> str:
    """The `reqdrive run` that goes on from this plan."""
    return f"reqdrive run {shlex.quote(requirement)} --run-id {run_id}"
