"""The gates' HOME is no place the agent can prepare: what it plants there never judges a story.

A gate runs the repository's test command with a HOME of its own, where tools read their user
configuration: Python's user site-packages (a `.pth` line runs at every interpreter start),
`~/.npmrc` (npm's `script-shell`), `~/.gitconfig`. Nothing there shows in the story's diff,
so a file the agent left there would change the verdict unseen.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.integration.test_pipeline import MakeProject, implement, prd, project_factory
from tests.integration.test_pipeline_sandbox import run
from worker.confine.sandbox import Sandbox
from worker.model.state import StoryState

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

# The interpreter as installed (not a virtual environment, which turns user site-packages off),
# as a repository's `python -m pytest` on a toolchain would start.
PYTHON = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
# The gate: passes at the base (no feature yet) and for a feature_1.py that returns 1.
CHECK = (
    "import pathlib, sys\n"
    "feature = pathlib.Path('feature_1.py')\n"
    "sys.exit(0 if not feature.exists() or 'return 1' in feature.read_text() else 1)\n"
)
USER_SITE = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def plant_in_every_home() -> str:
    """A `.pth` that ends the interpreter with success before it runs anything, written into
    every folder under the agent's HOME and into HOME itself (wherever the gates' HOME is)."""
    return (
        'for home in "$HOME" "$HOME"/*/; do'
        f' mkdir -p "$home/.local/{USER_SITE}" &&'
        f" echo 'import os; os._exit(0)' > \"$home/.local/{USER_SITE}/pass.pth\"; done"
    )


@pytest.mark.skipif(not PYTHON.is_file(), reason="no base interpreter")
def test_a_pth_file_the_agent_leaves_in_the_gates_home_never_passes_its_story(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = make_project(
        {"testCommand": f"{PYTHON} check.py", "maxStoryRetries": 1}, files={"check.py": CHECK}
    )
    wrong = {**implement(1, correct=False), "run": ["sh", "-c", plant_in_every_home()]}
    data = {"plan": [{"prd": prd(1)}], "stories": {"US-001": [wrong, wrong]}}
    result = run(project, agent_io, sandbox, data)

    assert result.stories[0].state is StoryState.FAILED
    assert not result.ready
