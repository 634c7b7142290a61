"""What an agent or a gate leaves behind in the sandbox gives nobody a privilege, hangs no
reader, leads the worker nowhere through a link, and is gone when the run ends."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from tests.integration.test_pipeline import MakeProject, git, implement, prd, project_factory
from tests.integration.test_pipeline_sandbox import run
from worker.confine.sandbox import Sandbox
from worker.exceptions import PrdError
from worker.model.state import StoryState

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

# The folders beside the worktree a run's agent and gates write, and the worker's bytecode of
# the worktree's modules: all gone when the run ends.
SCRATCH = ("homes", "gatehomes", "handoff", "gitviews", "bytecode")
PRIVILEGE_BITS = stat.S_ISUID | stat.S_ISGID


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def privileged_files(root: Path) -> list[str]:
    """Everything under root (links not followed) with a setuid or setgid bit."""
    found = []
    for folder, names, files in os.walk(root):
        for name in [*names, *files]:
            path = Path(folder) / name
            if path.lstat().st_mode & PRIVILEGE_BITS and not path.is_symlink():
                found.append(str(path.relative_to(root)))
    return found


def scratch_left(work_dir: Path) -> list[str]:
    return [name for name in SCRATCH if (work_dir / name / "run-1").exists()]


def test_a_setuid_shell_the_agent_leaves_keeps_no_bit_anywhere_the_run_wrote(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = make_project()
    attack = (
        'cp /bin/sh "$HOME/sh" && chmod 6755 "$HOME/sh" && mkdir -p "$HOME/kept" &&'
        ' chmod 2755 "$HOME/kept" && cp /bin/sh tool && chmod 4755 tool &&'
        " chmod 6644 tests/test_base.py && id -u > uid.txt"
    )
    data = {
        "plan": [{"prd": prd(1)}],
        "stories": {"US-001": [{**implement(1), "run": ["sh", "-ec", attack]}]},
    }
    result = run(project, agent_io, sandbox, data)

    assert result.stories[0].state is StoryState.PASSED
    assert privileged_files(project.work_dir) == []
    # It ran as an ordinary user in there, whoever the worker is.
    assert git(project.remote, "show", "reqdrive/req-001-demo:uid.txt") == "1000"
    assert "cleared setuid/setgid bits" in (project.run_dir() / "progress.txt").read_text()


def test_fifos_and_sockets_left_in_the_worktree_are_refused_and_the_run_goes_on(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = make_project()
    listen = "import socket; socket.socket(socket.AF_UNIX).bind('agent.sock')"
    attack = f'mkfifo pipe && mkfifo "$HOME/pipe" && {sys.executable} -c "{listen}"'
    data = {
        "plan": [{"prd": prd(2)}],
        "stories": {
            "US-001": [{**implement(1), "run": ["sh", "-ec", attack]}],
            "US-002": [implement(2)],
        },
    }
    result = run(project, agent_io, sandbox, data)

    assert [s.state for s in result.stories] == [StoryState.PASSED] * 2
    progress = (project.run_dir() / "progress.txt").read_text()
    for refused in ("pipe (FIFO)", "agent.sock (socket)"):
        assert refused in progress, progress
    assert "pipe" not in project.branch_files()


def test_a_gate_that_swaps_its_temp_folder_for_a_link_reaches_no_host_file(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox, tmp_path: Path
) -> None:
    host = tmp_path / "host-folder"
    host.mkdir()
    # Named as the next gate's report: the worker clears that name before the gate runs,
    # and reads it after.
    markers = [host / "baseline.second.junit.xml", host / "marker.txt"]
    for marker in markers:
        marker.write_text("the worker's own file")
    swap = f'rm -rf "$TMPDIR" && ln -s {host} "$TMPDIR"'
    gates = [{"name": "swap", "command": swap}, {"name": "second", "command": "true"}]
    project = make_project({"gates": gates})
    data = {"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}}
    result = run(project, agent_io, sandbox, data)

    assert result.stories[0].state is StoryState.PASSED
    assert all(marker.read_text() == "the worker's own file" for marker in markers)


def test_no_home_gate_home_hand_over_or_git_view_folder_outlives_a_run(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = make_project()
    data = {"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}}
    result = run(project, agent_io, sandbox, data)

    assert result.stories[0].state is StoryState.PASSED
    assert scratch_left(project.work_dir) == []


def test_no_scratch_folder_outlives_a_failed_run_either(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = make_project()
    data = {"plan": [{"prd_raw": "not a plan", "run": ["sh", "-c", 'touch "$HOME/notes"']}]}
    with pytest.raises(PrdError):
        run(project, agent_io, sandbox, data)

    assert scratch_left(project.work_dir) == []


def test_a_run_starts_without_what_a_killed_run_left_in_its_home(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    """A worker killed mid-call never reached its `finally`: its HOME (a setuid shell, an
    `.npmrc`) is still on disk when the run is resumed or started again."""
    project = make_project()
    stale = project.work_dir / "homes" / "run-1"
    stale.mkdir(parents=True)
    shutil.copy("/bin/sh", stale / "sh")
    (stale / "sh").chmod(0o4755)
    (stale / ".npmrc").write_text("script-shell=/tmp/evil\n")
    look = 'ls -A "$HOME" > home-listing.txt'
    data = {
        "plan": [{"prd": prd(1)}],
        "stories": {"US-001": [{**implement(1), "run": ["sh", "-c", look]}]},
    }
    result = run(project, agent_io, sandbox, data)

    assert result.stories[0].state is StoryState.PASSED
    listing = git(project.remote, "show", "reqdrive/req-001-demo:home-listing.txt")
    assert "sh" not in listing.split() and ".npmrc" not in listing.split()
