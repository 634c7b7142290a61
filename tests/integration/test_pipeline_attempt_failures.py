"""A failure inside an attempt fails that attempt, not the run: the worktree is put back and
the story gets its next attempt.

The agent runs unsandboxed (the tests' default), so what it leaves is exactly what it wrote.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_pipeline import (
    MakeProject,
    implement,
    prd,
    project_factory,
    story_commits,
)
from worker.model.state import AttemptOutcome, StoryState


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def nested_repository_with_a_command(marker: Path) -> str:
    """A repository nested at sub/ and a `.gitmodules` whose `update = !cmd` line git refuses
    to read: every git command of the worker's that looks at submodules then exits 128."""
    return (
        "set -e; mkdir sub; cd sub; git init -q; echo hi > f.txt; git add f.txt;"
        " git -c user.name=a -c user.email=a@b.invalid commit -qm nested; cd ..;"
        ' printf \'[submodule "sub"]\\n\\tpath = sub\\n\\turl = ./sub\\n'
        f"\\tupdate = !touch {marker}\\n' > .gitmodules"
    )


def test_a_change_the_workers_git_refuses_is_a_failed_attempt_and_the_run_goes_on(
    make_project: MakeProject, tmp_path: Path
) -> None:
    project = make_project()
    marker = tmp_path / "update-ran.txt"
    broken = {**implement(1), "run": ["sh", "-ec", nested_repository_with_a_command(marker)]}
    scenario = project.scenario(
        {"plan": [{"prd": prd(1)}], "stories": {"US-001": [broken, implement(1)]}}
    )
    result = project.run(scenario)

    [story] = result.stories
    first, second = story.attempts
    assert first.outcome is AttemptOutcome.CHECK_FAILED
    assert first.reason.startswith(
        "the worker's git refused what the agent left: "
        "fatal: invalid value for 'submodule.sub.update'; the worktree was put back to "
    )
    assert first.commit is None
    # The worktree was clean again for the next attempt, which passed on its own change only.
    assert second.outcome is AttemptOutcome.PASSED
    assert story.state is StoryState.PASSED
    assert project.branch_log() == story_commits(1)
    files = project.branch_files()
    assert ".gitmodules" not in files and not any(f.startswith("sub") for f in files)
    assert not marker.exists()
    # The agent and the person reading the run are both told why the attempt failed.
    run_dir = project.run_dir()
    assert "submodule.sub.update" in (run_dir / "iteration-2.prompt.md").read_text()
    assert "check failed" in (run_dir / "progress.txt").read_text()
