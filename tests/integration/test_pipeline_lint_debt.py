"""A lint gate that fails on the base: stories judged on the findings they add, not its debt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_pipeline import MakeProject, Project, implement, prd, project_factory
from worker.model.state import AttemptOutcome, StoryState

# A real linter in a few lines: every TODO left in a Python file is a finding, printed as
# ruff and flake8 print theirs (`path:line:col: CODE message`); any finding fails the gate.
LINT_SCRIPT = r"""#!/bin/bash
find . -name '*.py' -not -path './.git/*' | sort | xargs awk '
  /TODO/ { text = $0; sub(/.*TODO/, "TODO", text); sub(/^\.\//, "", FILENAME)
           printf "%s:%d:1: T001 %s\n", FILENAME, FNR, text; found = 1 }
  END { exit found }'
"""
# The base's debt: two findings the requirement has nothing to do with.
LEGACY = "def old():  # TODO rename\n    return 1  # TODO test\n"


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def indebted_project(make_project: MakeProject) -> Project:
    return make_project(
        {"lintCommand": "bash lint.sh"}, files={"lint.sh": LINT_SCRIPT, "legacy.py": LEGACY}
    )


def with_files(step: dict[str, Any], **files: str) -> dict[str, Any]:
    return {"write": {**step["write"], **files}}


def test_a_story_that_adds_no_finding_passes_and_the_pr_is_ready_despite_the_bases_lint(
    make_project: MakeProject,
) -> None:
    project = indebted_project(make_project)
    result = project.run(
        project.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    )

    [story] = result.stories
    assert story.state is StoryState.PASSED, story.attempts[-1].reason
    lint = {g.name: g for g in result.final_gates}["lint"]
    assert not lint.passed and "legacy.py:2:1: T001 TODO test" in lint.output_tail
    assert result.ready and result.draft_reason is None
    assert result.failing_on_base == {
        "lint": "2 findings on the base commit; this branch adds none"
    }
    body = (project.run_dir() / "pr.md").read_text()
    assert "### Fails on the base too (not this PR's doing)" in body
    assert "- `lint`: 2 findings on the base commit; this branch adds none" in body
    assert "but for `lint`, which fails on the base too" in body
    assert "ready for review; fails on the base too (not this PR's doing): lint" in (
        project.console.getvalue()
    )


def test_a_story_that_adds_a_finding_fails_naming_it_and_is_retried(
    make_project: MakeProject,
) -> None:
    project = indebted_project(make_project)
    sloppy = with_files(implement(1), **{"feature_1.py": "def value():\n    return 1  # TODO\n"})
    result = project.run(
        project.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [sloppy, implement(1)]}})
    )

    [story] = result.stories
    assert [a.outcome for a in story.attempts] == [
        AttemptOutcome.GATES_FAILED,
        AttemptOutcome.PASSED,
    ]
    assert story.attempts[0].reason == "gate lint failed: 1 new finding: feature_1.py: T001 TODO"
    assert result.ready


def test_moving_a_line_that_has_a_finding_adds_no_finding(make_project: MakeProject) -> None:
    project = indebted_project(make_project)
    # The story puts a function above the legacy code: both findings move down two lines.
    moved = with_files(implement(1), **{"legacy.py": "def newer():\n    return 2\n" + LEGACY})
    result = project.run(
        project.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [moved]}})
    )

    [story] = result.stories
    assert story.state is StoryState.PASSED, story.attempts[-1].reason
    lint = {g.name: g for g in result.final_gates}["lint"]
    assert "legacy.py:4:1: T001 TODO test" in lint.output_tail
    assert result.ready
    assert result.failing_on_base == {
        "lint": "2 findings on the base commit; this branch adds none"
    }


def test_a_lint_failing_on_the_base_without_findings_keeps_the_draft_and_says_so(
    make_project: MakeProject,
) -> None:
    # A check whose output names no `path:line: message`: judged by its exit code, as before.
    project = make_project({"lintCommand": "echo 'style check: 3 problems'; exit 1"}, files={})
    result = project.run(
        project.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    )

    assert result.stories[0].state is StoryState.PASSED
    assert not result.ready
    assert (
        result.draft_reason == "the final checks fail on the branch: lint (fails on the base too)"
    )
    assert result.failing_on_base == {}
    body = (project.run_dir() / "pr.md").read_text()
    assert "**Draft**: the final checks fail on the branch: lint (fails on the base too)." in body
