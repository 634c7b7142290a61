"""Like with like: a story's new tests are proven failing on its parent in a narrowed run (only
their files collected), so at its head they also run that same way, beside the whole suite's
run. A test that tells the two apart (the worker's variables, the few tests in the session,
its sibling modules not imported) and fails only in the narrowed one would otherwise be
"proven" on the parent and "passing" at the head with no work done."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_frozen_tests import (
    CALC,
    OWN_TEST,
    RIGHT_MUL,
    calc_project,
    make_project,  # noqa: F401 (the fixture)
    run,
)
from tests.integration.test_pipeline import MakeProject
from worker.confine.sandbox import Sandbox
from worker.model.state import AttemptOutcome, StoryState

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

# Tests that fail where only their own file is collected and pass in the whole suite's run,
# whatever calc does: each looks at something that differs between the two.
BY_VARIABLES = (
    "import os\n\n\n"
    "def test_mul():\n"
    "    assert not [k for k in os.environ if k in ('REQDRIVE_ONLY', 'REQDRIVE_NARROW')]\n"
)
BY_SIBLINGS = "import sys\n\n\ndef test_mul():\n    assert 'tests.test_calc' in sys.modules\n"
# The implement call's change: nothing that makes mul work.
UNRELATED = CALC + "\n# mul comes later\n"
CHEAT_ID = "tests.test_mul::test_mul"


def steps(mode: str, tests: dict[str, Any], implement: dict[str, Any]) -> list[dict[str, Any]]:
    """One attempt: with `tests: first` a tests call then an implement call; with `together`
    one call writing both."""
    if mode == "first":
        return [{"tests": tests, "implement": implement}]
    return [{"write": {**tests["write"], **implement["write"]}}]


@pytest.mark.parametrize("mode", ["first", "together"])
@pytest.mark.parametrize("cheat", [BY_VARIABLES, BY_SIBLINGS], ids=["variables", "siblings"])
def test_a_test_that_fails_only_in_the_narrowed_proof_does_not_pass_the_story(
    make_project: MakeProject,  # noqa: F811 (the fixture)
    agent_io: Path,
    sandbox: Sandbox,
    mode: str,
    cheat: str,
) -> None:
    project = calc_project(make_project, failing_test=False, tests=mode, maxStoryRetries=1)
    story = steps(mode, {"write": {"tests/test_mul.py": cheat}}, {"write": {"calc.py": UNRELATED}})
    result = run(project, agent_io, sandbox, story, owns_failing_test=False)

    record = result.stories[0]
    attempt = record.attempts[-1]
    assert record.state is not StoryState.PASSED, attempt.reason
    assert not result.ready
    assert attempt.outcome is AttemptOutcome.NEEDS_REVIEW, attempt.reason
    assert CHEAT_ID in attempt.reason
    assert "depends on which tests run with it" in attempt.reason
    check = next(c for c in attempt.tests if c.id == CHEAT_ID)
    assert (check.at_parent, check.after) == ("failed", "passed")
    assert "depends on which tests run with it" in check.problem


@pytest.mark.parametrize("mode", ["first", "together"])
def test_an_honest_story_passes_in_both_runs_and_is_ready(
    make_project: MakeProject,  # noqa: F811 (the fixture)
    agent_io: Path,
    sandbox: Sandbox,
    mode: str,
) -> None:
    project = calc_project(make_project, failing_test=False, tests=mode)
    story = steps(
        mode, {"write": {"tests/test_mul.py": OWN_TEST}}, {"write": {"calc.py": RIGHT_MUL}}
    )
    result = run(project, agent_io, sandbox, story, owns_failing_test=False)

    record = result.stories[0]
    assert record.state is StoryState.PASSED, record.attempts[-1].reason
    assert result.ready, result.draft_reason
    # The head ran the story's tests as its proof did, beside the whole suite.
    assert list(project.run_dir().glob("iteration-1.alike.*.log")), sorted(
        p.name for p in project.run_dir().iterdir()
    )
