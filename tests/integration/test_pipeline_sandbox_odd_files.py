"""Files the worker's own git and secret scan meet after the agent: none hangs or crashes them.

A FIFO would block any reader that opens it; a device cannot be made in the sandbox (no
capability); names with a newline or bytes that are not UTF-8 break line-based parsing; a
symlink to a file outside the worktree is read by anything that follows links.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.integration.test_pipeline import MakeProject, git, implement, prd, project_factory
from tests.integration.test_pipeline_sandbox import run
from worker.confine.sandbox import Sandbox
from worker.model.state import StoryState

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

SECRET = "worker-only-key-4f1c2d9e7a"


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def test_fifos_odd_names_and_links_out_neither_hang_nor_leak(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox, tmp_path: Path
) -> None:
    project = make_project()
    key = tmp_path / "app-key.pem"  # outside every bind: the link dangles inside
    key.write_text(SECRET)
    attack = (
        "mkfifo pipe && mkfifo tests/test_fifo.py && printf x > \"$(printf 'new\\nline.txt')\""
        " && printf y > \"$(printf 'bad\\377.txt')\" && ln -s "
        f"{key} leak.pem && (mknod dev c 1 3 || true)"
    )
    data = {
        "plan": [{"prd": prd(1)}],
        "stories": {"US-001": [{**implement(1), "run": ["sh", "-ec", attack]}]},
    }
    result = run(project, agent_io, sandbox, data)

    assert result.stories[0].state is StoryState.PASSED
    files = project.branch_files()
    assert {'"new\\nline.txt"', '"bad\\377.txt"'} <= set(files)  # as ls-tree quotes them
    assert "leak.pem" in files and "pipe" not in files and "dev" not in files
    # The link went in as a link (its target's name), never as the key it names.
    assert git(project.remote, "show", "reqdrive/req-001-demo:leak.pem") == str(key)
    assert SECRET not in git(project.remote, "log", "-p", "reqdrive/req-001-demo")


def test_control_characters_in_a_name_the_agent_chose_never_reach_the_pr_body(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    """A reverted write is listed by its name: an escape there would set the title of (OSC 0)
    or write the clipboard of (OSC 52) the terminal that shows `pr.md`, and garble the PR."""
    project = make_project()
    name = ".github/workflows/a\\033]0;owned\\007\\033[2J\\001.yml"
    attack = f"mkdir -p .github/workflows && printf x > \"$(printf '{name}')\""
    data = {
        "plan": [{"prd": prd(1)}],
        "stories": {"US-001": [{**implement(1), "run": ["sh", "-ec", attack]}]},
    }
    result = run(project, agent_io, sandbox, data)

    assert result.stories[0].attempts[0].forbidden_writes  # the name was there to show
    body = (project.run_dir() / "pr.md").read_text()
    assert not [c for c in body if (ord(c) < 32 and c != "\n") or 127 <= ord(c) < 160]
    assert "a\\x1b]0;owned\\x07\\x1b[2J\\x01.yml" in body  # shown, escaped
