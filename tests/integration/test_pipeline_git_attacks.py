"""An agent that rewrites git's files cannot make the worker's git run code or commit elsewhere.

The agent here runs unsandboxed (REQDRIVE_SANDBOX=off), so every file it attacks is within its
reach: what these tests show is the worker's own git trusting none of it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_pipeline import (
    MakeProject,
    git,
    implement,
    prd,
    project_factory,
    story_commits,
)
from worker.model.state import AttemptOutcome, StoryState


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def common_dir() -> str:
    return '"$(git rev-parse --path-format=absolute --git-common-dir)"'


def evil_program(tmp_path: Path, marker: Path) -> Path:
    """A program that leaves a mark when anything runs it, and passes its input through."""
    program = tmp_path / "evil.sh"
    program.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\ncat\n')
    program.chmod(0o755)
    return program


def attacks(tmp_path: Path, marker: Path) -> dict[str, str]:
    evil = evil_program(tmp_path, marker)
    included = tmp_path / "included.conf"
    included.write_text(f'[filter "y"]\n\tclean = {evil}\n\tsmudge = {evil}\n\trequired = true\n')
    return {
        "filter": (
            f"git config filter.x.clean {evil} && git config filter.x.required true"
            " && printf '* filter=x\\n' > .gitattributes"
        ),
        "hook": (
            f"for h in pre-commit commit-msg post-commit pre-push reference-transaction; do "
            f"cp {evil} {common_dir()}/hooks/$h; done; "
            f"mkdir -p myhooks && cp {evil} myhooks/pre-commit && "
            f"git config core.hooksPath $PWD/myhooks"
        ),
        "gpg": f"git config commit.gpgSign true && git config gpg.program {evil}",
        "include": (
            f"git config include.path {included} && printf '* filter=y\\n' > .gitattributes"
        ),
        "fsmonitor": f"git config core.fsmonitor {evil}",
    }


@pytest.mark.parametrize("attack", ["filter", "hook", "gpg", "include", "fsmonitor"])
def test_config_the_agent_plants_never_runs_in_the_workers_git(
    make_project: MakeProject, tmp_path: Path, attack: str
) -> None:
    project = make_project()
    marker = tmp_path / "ran.txt"
    script = attacks(tmp_path, marker)[attack]
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(1)}],
            "stories": {"US-001": [{**implement(1), "run": ["sh", "-ec", script]}]},
        }
    )
    result = project.run(scenario)

    assert not marker.exists(), marker.read_text()
    assert result.stories[0].state is StoryState.PASSED
    assert project.branch_log() == story_commits(1)
    # The commit went out as the worker made it: unsigned, by reqdrive.
    raw = git(project.remote, "cat-file", "commit", "reqdrive/req-001-demo")
    assert "gpgsig" not in raw and "committer reqdrive" in raw


def other_checkout(tmp_path: Path) -> tuple[Path, Path]:
    """A repository with a linked worktree (as a spare of another run), both with one commit."""
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "main")
    (other / "a.txt").write_text("a\n")
    git(other, "add", "-A")
    git(other, "commit", "-qm", "other's own")
    spare = tmp_path / "other-spare"
    git(other, "worktree", "add", "-q", "--detach", str(spare))
    return other, spare


@pytest.mark.parametrize("target", ["spare", "user checkout"])
def test_a_git_file_pointed_elsewhere_never_redirects_a_commit_or_push(
    make_project: MakeProject, tmp_path: Path, target: str
) -> None:
    project = make_project()
    other, spare = other_checkout(tmp_path)
    gitdir = other / ".git" / ("worktrees/other-spare" if target == "spare" else "")
    before = {
        "log": git(other, "log", "--all", "--format=%H %s"),
        "head": git(other, "symbolic-ref", "HEAD"),
        "index": (other / ".git" / "index").read_bytes(),
        "status": git(other, "status", "--porcelain"),
    }
    script = f"printf 'gitdir: {gitdir.resolve()}\\n' > .git"
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(1)}],
            "stories": {"US-001": [{**implement(1), "run": ["sh", "-ec", script]}]},
        }
    )
    result = project.run(scenario)

    assert result.stories[0].state is StoryState.PASSED
    assert project.branch_log() == story_commits(1)
    after = {
        "log": git(other, "log", "--all", "--format=%H %s"),
        "head": git(other, "symbolic-ref", "HEAD"),
        "index": (other / ".git" / "index").read_bytes(),
        "status": git(other, "status", "--porcelain"),
    }
    assert after == before
    assert git(spare, "status", "--porcelain") == ""


def test_a_checkout_whose_branch_the_agent_switched_is_put_back_before_the_commit(
    make_project: MakeProject,
) -> None:
    project = make_project()
    script = "git checkout -q -b elsewhere"
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(1)}],
            "stories": {"US-001": [{**implement(1), "run": ["sh", "-ec", script]}]},
        }
    )
    result = project.run(scenario)

    assert result.stories[0].attempts[0].outcome is AttemptOutcome.PASSED
    assert project.branch_log() == story_commits(1)
    assert "elsewhere" not in git(project.remote, "branch", "--list")
