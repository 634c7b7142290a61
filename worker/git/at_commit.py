"""Files as a commit has them, never as the worktree does: the repository's config, a template."""

from __future__ import annotations

from pathlib import Path

from worker.git.runner import run_git
from worker.model.repo_config import CONFIG_PATHS, RepoConfig, parse_repo_config


def read_repo_config(worktree: Path, base_sha: str) -> tuple[RepoConfig, str | None]:
    """The configuration on the base commit, never the agent's branch; and where it was."""
    for path in CONFIG_PATHS:
        text = read_file_at(worktree, base_sha, path)
        if text is not None:
            return parse_repo_config(text, path), path
    return RepoConfig(), None


def read_file_at(cwd: Path, sha: str, path: str) -> str | None:
    """A file's text at a commit, or None when the commit has no such file."""
    listed = run_git(["ls-tree", "--name-only", sha, "--", path], cwd=cwd)
    if listed.strip() != path:
        return None
    return run_git(["cat-file", "blob", f"{sha}:{path}"], cwd=cwd)
