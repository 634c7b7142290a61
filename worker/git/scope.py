"""What an agent may leave in the worktree: nothing from planning, no forbidden path."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from worker.confine.safe_paths import LinkError, remove_under, unlink_under
from worker.git.runner import run_git
from worker.model.repo_config import matches_any


@dataclass(frozen=True)
class TreeState:
    """What planning must leave unchanged: the checked-out branch, its commit, and every
    modified or untracked file; ignored files (caches) are listed apart."""

    head_ref: str
    head: str
    status: str
    ignored: frozenset[str]
    # The same, a wholly ignored folder named once: what a revert keeps (a setup's .venv).
    ignored_paths: tuple[str, ...] = ()


def tree_state(cwd: Path) -> TreeState:
    """The worktree's state now, to compare with after the agent's turn."""
    # --ignore-submodules=dirty: a submodule counts as changed when its commit moved, and git
    # never looks into its folder for more. Looking runs a child git there, which reads that
    # folder's config — a repository the agent may have made, whose clean filter or fsmonitor
    # would run here, outside the sandbox, as the worker. (The option, not the setting
    # diff.ignoreSubmodules: the worktree's `.gitmodules` overrides that one.)
    status = run_git(
        [
            "status",
            "--porcelain=v1",
            "-z",
            "--ignored",
            "--untracked-files=all",
            "--ignore-submodules=dirty",
        ],
        cwd=cwd,
    )
    entries = [e for e in status.split("\0") if e]
    return TreeState(
        # Both exit 1 and print nothing for a HEAD the agent detached or left on an orphan
        # branch: "" then differs from before, and the change is reverted, not a crash.
        head_ref=run_git(["symbolic-ref", "--quiet", "HEAD"], cwd=cwd, check=False),
        head=run_git(["rev-parse", "--verify", "--quiet", "HEAD"], cwd=cwd, check=False),
        status="\0".join(e for e in entries if not e.startswith("!! ")),
        ignored=frozenset(e[3:] for e in entries if e.startswith("!! ")),
        ignored_paths=tuple(ignored_now(cwd)),
    )


def undo_planning_changes(cwd: Path, branch: str, before: TreeState) -> str | None:
    """Put the worktree back as planning found it; say what had changed, or None if only
    ignored files appeared.

    An agent reading or running code makes caches (__pycache__/, .pytest_cache) that
    .gitignore hides: they are removed without failing the attempt. Anything else (a tracked
    file, a new commit, an untracked file) is reverted and fails it.
    """
    after = tree_state(cwd)
    if (after.head_ref, after.head, after.status) == (before.head_ref, before.head, before.status):
        _remove(cwd, sorted(after.ignored - before.ignored))
        return None
    restore_tree(cwd, branch, before.head, ignored_too=True, keep=before.ignored_paths)
    return _describe_change(before, after)


def _describe_change(before: TreeState, after: TreeState) -> str:
    parts = []
    if before.head_ref != after.head_ref or before.head != after.head:
        parts.append(f"HEAD ({before.head[:12]} -> {after.head[:12]})")
    paths = sorted(set(after.status.split("\0")) - set(before.status.split("\0")) - {""})
    parts += [p[3:] for p in paths[:10]]
    if len(paths) > 10:
        parts.append(f"and {len(paths) - 10} more")
    return ", ".join(parts) or "the working tree"


def _remove(cwd: Path, ignored: Sequence[str]) -> None:
    """Delete these ignored files, and the folders they leave empty."""
    for name in ignored:
        path = cwd / name
        with contextlib.suppress(LinkError):  # a nested repository is listed whole
            remove_under(cwd, name)
        for folder in path.parents:
            if folder == cwd or not folder.is_relative_to(cwd) or any(folder.iterdir()):
                break
            folder.rmdir()


def restore_tree(
    cwd: Path, branch: str, sha: str, *, ignored_too: bool = False, keep: Sequence[str] = ()
) -> None:
    """Check out `branch` at `sha` with nothing else in the worktree (ignored files kept
    unless `ignored_too`; the paths in `keep` always)."""
    run_git(["symbolic-ref", "HEAD", f"refs/heads/{branch}"], cwd=cwd)
    run_git(["reset", "--hard", "--quiet", sha], cwd=cwd)
    clean_untracked(cwd, ignored_too=ignored_too, keep=keep)


def clean_untracked(cwd: Path, *, ignored_too: bool, keep: Sequence[str] = ()) -> None:
    """Every untracked file removed (ignored ones too when `ignored_too`), but `keep`'s:
    paths from the worktree's top, each kept whole."""
    excluded = [arg for path in keep for arg in ("-e", "/" + _literal(path.strip("/")))]
    run_git(["clean", "-ffdx" if ignored_too else "-ffd", "--quiet", *excluded], cwd=cwd)


def ignored_now(cwd: Path) -> list[str]:
    """The ignored paths in the worktree now, a folder named once (as `folder/`)."""
    listed = run_git(
        ["ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"], cwd=cwd
    )
    return [p for p in listed.split("\0") if p]


def _literal(path: str) -> str:
    """A path as a gitignore pattern that matches only itself."""
    return "".join("\\" + c if c in "*?[\\!#" else c for c in path)


def collect_changes(cwd: Path, branch: str, pre: str, forbidden: list[str]) -> list[str]:
    """Make the agent's work one set of staged changes on top of `pre`, without anything
    under `forbidden`; return the forbidden paths it touched (now reverted)."""
    # The agent may have committed, switched branches or moved HEAD: point HEAD back at the
    # run's branch and squash whatever it committed into the working tree's state.
    run_git(["symbolic-ref", "HEAD", f"refs/heads/{branch}"], cwd=cwd)
    run_git(["reset", "--soft", "--quiet", pre], cwd=cwd)
    run_git(["add", "--all"], cwd=cwd)
    changed = run_git(["diff", "--cached", "--name-only", "--no-renames", "-z", pre], cwd=cwd)
    touched = [p for p in changed.split("\0") if p and matches_any(p, forbidden)]
    if touched:
        revert_staged(cwd, pre, touched)
    return touched


def revert_staged(cwd: Path, pre: str, paths: Sequence[str]) -> None:
    """Staged changes to these paths undone: back to `pre`'s version, or gone if new (a
    link goes first, so nothing is restored through it)."""
    listed = run_git(["ls-tree", "-r", "--name-only", "-z", pre, "--", *paths], cwd=cwd)
    existed = set(listed.split("\0"))
    restore = [p for p in paths if p in existed]
    added = [p for p in paths if p not in existed]
    if added:
        run_git(["rm", "--cached", "--quiet", "-r", "-f", "--", *added], cwd=cwd)
        for name in added:
            with contextlib.suppress(LinkError, FileNotFoundError):
                unlink_under(cwd, name)
    if restore:
        run_git(["checkout", pre, "--", *restore], cwd=cwd)


def has_staged_changes(cwd: Path, pre: str) -> bool:
    """Is anything staged that `pre` does not have?"""
    return bool(run_git(["diff", "--cached", "--name-only", pre], cwd=cwd))
