"""A repository the agent nests in its worktree never runs its config in the worker's git.

The worker's git config (worker/git/runner.py) governs the run's repository only. A repository
with a submodule checks it out as an empty folder; an agent in the sandbox can make a git
repository there, with a config of its own. When the worker's `git status` or `git diff` then
looks into that folder to see whether the submodule is modified, a child git reads that config
and ran a clean filter it names: outside the sandbox, as the worker.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.integration.test_pipeline import MakeProject, Project, git, prd, project_factory
from tests.integration.test_pipeline_sandbox import run
from worker.confine.sandbox import Sandbox

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

SUBMODULE = "vendor/lib"


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def with_submodule(project: Project, tmp_path: Path) -> None:
    """The project's main branch with a submodule at SUBMODULE (a commit link, never fetched),
    whose `.gitmodules` asks git to look into it (`ignore = none`)."""
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(project.remote), str(clone))
    sha = git(clone, "rev-parse", "HEAD")
    git(clone, "update-index", "--add", "--cacheinfo", f"160000,{sha},{SUBMODULE}")
    (clone / ".gitmodules").write_text(
        f'[submodule "lib"]\n\tpath = {SUBMODULE}\n'
        "\turl = https://example.invalid/lib.git\n\tignore = none\n"
    )
    git(clone, "add", ".gitmodules")
    git(clone, "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-qm", "submodule")
    git(clone, "push", "-q", "origin", "HEAD:main")


def nested_repository(marker: Path) -> str:
    """A repository at SUBMODULE whose clean filter writes `marker` (out of the sandbox's
    reach) and whose one file is modified, so every look into it runs the filter."""
    evil = f"sh -c 'echo ran >> {marker}; cat'"
    return (
        f"set -e; mkdir -p {SUBMODULE}; cd {SUBMODULE}; git init -q; echo hi > f.txt;"
        " printf '* filter=evil\\n' > .gitattributes; git add -A;"
        " git -c user.name=a -c user.email=a@b.invalid commit -qm nested;"
        f' git config filter.evil.clean "{evil}"; git config filter.evil.required true;'
        " echo changed > f.txt"
    )


def test_a_repository_planted_in_a_submodules_folder_never_runs_its_filter_in_the_worker(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox, tmp_path: Path
) -> None:
    project = make_project()
    with_submodule(project, tmp_path)
    marker = tmp_path / "ran-outside.txt"
    # Planning must leave the worktree as it found it: the worker compares with `git status`.
    attack = ["sh", "-c", nested_repository(marker)]
    data = {"plan": [{"prd": prd(1), "run": attack}], "stories": {"US-001": [{}]}}
    run(project, agent_io, sandbox, data)

    # The agent's own git ran inside (it cannot write there); only the worker's could have.
    assert not marker.exists(), marker.read_text()
