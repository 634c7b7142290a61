"""Planning's read-only rule on a real repository: caches go quietly, anything else fails."""

from __future__ import annotations

import subprocess
from pathlib import Path

from worker.git.scope import tree_state, undo_planning_changes


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / ".gitignore").write_text("__pycache__/\n*.log\n")
    (repo / "pkg" / "mod.py").write_text("x = 1\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    # A cache from before planning (the gates of an earlier step): it is kept.
    (repo / "pkg" / "__pycache__").mkdir()
    (repo / "pkg" / "__pycache__" / "old.pyc").write_text("old")
    return repo


def test_ignored_files_planning_made_are_removed_and_nothing_is_reported(tmp_path: Path) -> None:
    repo = repository(tmp_path)
    before = tree_state(repo)
    (repo / "pkg" / "__pycache__" / "mod.pyc").write_text("new")
    (repo / "deep" / "__pycache__").mkdir(parents=True)
    (repo / "deep" / "__pycache__" / "a.pyc").write_text("new")
    (repo / "agent.log").write_text("new")

    assert undo_planning_changes(repo, "main", before) is None
    assert (repo / "pkg" / "__pycache__" / "old.pyc").exists()
    assert not (repo / "pkg" / "__pycache__" / "mod.pyc").exists()
    assert not (repo / "deep").exists()
    assert not (repo / "agent.log").exists()


def test_an_untracked_file_beside_caches_is_reported_and_everything_reverted(
    tmp_path: Path,
) -> None:
    repo = repository(tmp_path)
    before = tree_state(repo)
    (repo / "notes.md").write_text("plan")
    (repo / "pkg" / "mod.py").write_text("x = 2\n")
    (repo / "agent.log").write_text("new")

    assert undo_planning_changes(repo, "main", before) == "pkg/mod.py, notes.md"
    assert (repo / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert not (repo / "notes.md").exists()
    assert not (repo / "agent.log").exists()
    # What was ignored before the call (a setup's .venv, a cache) stays: the run goes on
    # with it.
    assert git(repo, "status", "--porcelain", "--ignored") == "!! pkg/__pycache__/"
    assert (repo / "pkg" / "__pycache__" / "old.pyc").exists()
