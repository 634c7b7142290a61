"""Exceptions raised by the worker package; each maps to one user-facing sentence."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


class ReqdriveError(Exception):
    """Base class for every error the engine raises on purpose."""


class GitError(ReqdriveError):
    """A git command failed; carries the command (credentials never in it) and its stderr."""

    def __init__(self, args: Sequence[str], returncode: int | None, stderr: str) -> None:
        self.command = list(args)
        self.returncode = returncode
        self.stderr = stderr
        status = "timed out" if returncode is None else f"exited with {returncode}"
        super().__init__(f"git {' '.join(self.command)} {status}: {stderr.strip()[-2000:]}")


class WorkspaceError(ReqdriveError):
    """The repository cache or a run's worktree is not in the state the run needs."""


class PrdError(ReqdriveError):
    """prd.json is missing or invalid; the message names the field that is wrong."""


class RepoConfigError(ReqdriveError):
    """The repository's .github/reqdrive.yml is invalid; the message names the key."""


class AgentError(ReqdriveError):
    """The agent could not be started, or failed in a way that ends the run."""


class PreflightError(ReqdriveError):
    """A check before the run failed (dirty tree, missing requirement, branch mismatch)."""


class ChecksCannotStart(PreflightError):
    """At the baseline a gate's program or test runner could not start; the message names
    the gate, its command, what is missing and the fix. A preflight failure: nothing the
    agent does could make such a check pass, so no story is tried."""


class SetupFailed(PreflightError):
    """The repository's `setup` command failed before the baseline; the message holds its
    exit code and the end of its output. No check could import the project's code."""


class RunLockHeld(PreflightError):
    """Another worker holds this requirement's run lock."""


class FileLockHeld(ReqdriveError):
    """Another process holds a file lock; `holder` is what it wrote in the file."""

    def __init__(self, path: Path, holder: str) -> None:
        self.path = path
        self.holder = holder
        super().__init__(f"{path} is held by {holder}")


class ResumeError(ReqdriveError):
    """A checkpoint does not match the branch it claims to describe."""


class RunCancelled(ReqdriveError):
    """The run was stopped (Ctrl-C, /reqdrive cancel) before it had a plan to work on."""


class SandboxUnavailable(ReqdriveError):
    """No sandbox can be made on this machine; the message says how to get one or opt out."""


class BudgetReached(ReqdriveError):
    """No agent call may start: the run's budgetUsd or the installation's monthly budget is
    spent; the message says which, and what was spent."""

    def __init__(self, message: str, *, shared: bool = False) -> None:
        super().__init__(message)
        self.shared = shared  # the budget shared beyond this run (the installation's month)
