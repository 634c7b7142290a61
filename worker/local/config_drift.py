"""Whether the working tree's config is the one `reqdrive run` reads from the base branch.

`run` reads the requirement from the working tree but `.github/reqdrive.yml` from the base
branch (as the App does), so an edited or untracked config is silently not the one used:
`validate` refuses it and `run` warns.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from worker.exceptions import PreflightError
from worker.git.runner import run_git
from worker.model.repo_config import CONFIG_PATHS, RepoConfig, parse_repo_config

FROM_WORKTREE_OPTION = "--config-from-worktree"


@dataclass(frozen=True)
class WorktreeConfig:
    """The config file a checkout holds: its path in the repository and its text."""

    path: str
    text: str


@dataclass(frozen=True)
class ConfigDrift:
    """The working tree's config is not the one the branch `run` reads holds."""

    path: str
    branch: str
    committed: bool  # False: the branch has no config at this path (new, or never committed)

    def message(self) -> str:
        what = "differs from the one committed" if self.committed else "is not committed"
        return (
            f"{what} on {self.branch}, and run reads the config on {self.branch}: commit it, "
            f"or use {FROM_WORKTREE_OPTION}"
        )


def worktree_config(root: Path) -> WorktreeConfig | None:
    """The first config file present in the working tree, in the order `run` looks for them."""
    for path in CONFIG_PATHS:
        file = root / path
        if file.is_file():
            return WorktreeConfig(path, file.read_text(errors="replace"))
    return None


def config_from_worktree(root: Path) -> tuple[RepoConfig, str]:
    """The working tree's config, parsed (RepoConfigError names the key), for a run to use
    instead of the base branch's: nothing is committed in the user's checkout."""
    local = worktree_config(root)
    if local is None:
        raise PreflightError(
            f"{FROM_WORKTREE_OPTION}: there is no {' or '.join(CONFIG_PATHS)} in {root}"
        )
    return parse_repo_config(local.text, local.path), local.path


def current_branch(root: Path) -> str | None:
    """HEAD's branch (the one `run` uses without --base), or None when HEAD is detached."""
    return (
        run_git(
            ["symbolic-ref", "--quiet", "--short", "HEAD"],
            cwd=root,
            environment=os.environ,
            check=False,
        )
        or None
    )


def config_drift(root: Path, branch: str) -> ConfigDrift | None:
    """How the working tree's config differs from the branch's, or None when they agree (or
    the working tree has none: then the branch's, or the defaults, apply as expected)."""
    local = worktree_config(root)
    if local is None:
        return None
    committed = _committed_config(root, branch)
    if committed is None or committed.path != local.path:
        return ConfigDrift(local.path, branch, committed=False)
    # git's output comes without its last newline: compared without trailing newlines.
    if committed.text.rstrip("\n") != local.text.rstrip("\n"):
        return ConfigDrift(local.path, branch, committed=True)
    return None


def _committed_config(root: Path, branch: str) -> WorktreeConfig | None:
    """The config `run` reads on `branch`: the first of CONFIG_PATHS its tip holds."""
    sha = run_git(
        ["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}"],
        cwd=root,
        environment=os.environ,
        check=False,
    )
    if not sha:  # a branch with no commit yet holds no config
        return None
    for path in CONFIG_PATHS:
        listed = run_git(
            ["ls-tree", "--name-only", sha, "--", path],
            cwd=root,
            environment=os.environ,
            check=False,
        )
        if listed.strip() == path:
            text = run_git(["cat-file", "blob", f"{sha}:{path}"], cwd=root, environment=os.environ)
            return WorktreeConfig(path, text)
    return None
