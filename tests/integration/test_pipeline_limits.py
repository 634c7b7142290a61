"""A whole run in the App's sandbox whose agent forks without end: the pids limit stops it,
the attempt fails, and the run goes on to the next attempt."""

from __future__ import annotations

import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.integration.test_pipeline import MakeProject, implement, prd
from tests.integration.test_pipeline_sandbox import make_project as make_project
from tests.integration.test_pipeline_sandbox import run
from worker.confine.limits import ResourceLimits
from worker.confine.sandbox import Sandbox
from worker.model.state import AttemptOutcome, StoryState

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

# Forks up to 5,000 children that wait (bounded, should the limit not hold), and writes the
# story's code only when every fork worked: an agent whose tool breaks under the limit.
FORK_BOMB = """
import os, sys, time
for _ in range(5000):
    try:
        pid = os.fork()
    except OSError as error:
        print(f"fork refused: {error}", flush=True)
        sys.exit(3)
    if pid == 0:
        time.sleep(60)
        os._exit(0)
with open(sys.argv[1], "w") as out:
    out.write(sys.argv[2])
"""


def test_a_fork_bomb_fails_its_attempt_and_the_run_goes_on(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = make_project()
    bomb = agent_io / "bomb.py"
    bomb.write_text(FORK_BOMB)
    tests_only = {k: v for k, v in implement(1)["write"].items() if k.startswith("tests/")}
    code = "def value():\n    return 1\n"
    data = {
        "plan": [{"prd": prd(1)}],
        "stories": {
            "US-001": [
                {"write": tests_only, "run": [sys.executable, str(bomb), "feature_1.py", code]},
                implement(1),
            ]
        },
    }
    limited = replace(sandbox, limits=ResourceLimits(pids=64))
    result = run(project, agent_io, limited, data, limits=ResourceLimits(pids=64))

    first, second = result.stories[0].attempts
    # Its test was frozen by its tests call; the implement call's bomb wrote no code.
    assert first.outcome is AttemptOutcome.NO_CHANGES
    assert first.reason.startswith("no changes: its frozen tests fail without the story's code")
    log = next(project.run_dir().glob("iteration-1.log")).read_text()
    assert "fork refused" in log
    assert second.outcome is AttemptOutcome.PASSED
    assert result.stories[0].state is StoryState.PASSED
