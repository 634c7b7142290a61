"""More cheats on frozen tests, each done by the scripted agent as a real process in the App's
sandbox on a real pytest suite in a real git repository: a plugin registered by packaging
metadata, state a check leaves for the next one, a frozen test rewritten while a check runs,
bytecode forged for a frozen test, and code under test that forges pytest's reports."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.integration.test_frozen_tests import (
    FORGING_PLUGIN,
    WRONG_MUL,
    assert_caught,
    calc_project,
    cheat,
    run,
)
from tests.integration.test_pipeline import MakeProject, project_factory
from worker.confine.sandbox import Sandbox

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


# Packaging metadata in a folder on sys.path (the worktree's top, for `python -m pytest`):
# importlib.metadata finds it, and pytest loads every `pytest11` entry point it names.
DIST_INFO = {
    "forge-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: forge\nVersion: 1.0\n",
    "forge-1.0.dist-info/entry_points.txt": "[pytest11]\nforge = forging_plugin\n",
}


def test_a_pytest_plugin_registered_by_packaging_metadata_is_reverted(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = calc_project(make_project)
    writes = {"calc.py": WRONG_MUL, "forging_plugin.py": FORGING_PLUGIN, **DIST_INFO}
    result = run(project, agent_io, sandbox, cheat({}, {"write": writes}))
    assert_caught(result, "forge-1.0.dist-info/entry_points.txt")
