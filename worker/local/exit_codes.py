"""The local commands' exit codes: one table from failure to code, and a run's own code."""

from __future__ import annotations

from enum import IntEnum

from worker.exceptions import (
    AgentError,
    GitError,
    PrdError,
    PreflightError,
    RepoConfigError,
    ReqdriveError,
    ResumeError,
    RunCancelled,
    SandboxUnavailable,
    WorkspaceError,
)
from worker.model.state import RunResult, StopReason


class ExitCode(IntEnum):
    """The seeds' exit codes, kept so scripts written for them still work."""

    SUCCESS = 0
    GENERAL_ERROR = 1
    MISSING_DEPENDENCY = 2
    CONFIG_ERROR = 3
    GIT_ERROR = 4
    AGENT_ERROR = 5
    PR_ERROR = 6
    USER_ABORT = 7
    PREFLIGHT_FAILED = 8
    # Not in the seeds: a run that finished with a draft is not a success a script may build on.
    NOT_READY = 9


# One table from failure to exit code; the message is the exception's own sentence.
EXIT_CODES: tuple[tuple[type[ReqdriveError], ExitCode], ...] = (
    (RunCancelled, ExitCode.USER_ABORT),
    (PreflightError, ExitCode.PREFLIGHT_FAILED),
    (RepoConfigError, ExitCode.CONFIG_ERROR),
    (GitError, ExitCode.GIT_ERROR),
    (WorkspaceError, ExitCode.GIT_ERROR),
    (ResumeError, ExitCode.GIT_ERROR),
    (PrdError, ExitCode.AGENT_ERROR),
    (AgentError, ExitCode.AGENT_ERROR),
    (SandboxUnavailable, ExitCode.MISSING_DEPENDENCY),
)


def run_exit_code(result: RunResult) -> ExitCode:
    """Ready is success; a run stopped by Ctrl-C or ending in a draft says so to the shell."""
    if result.stop_reason is StopReason.CANCELLED:
        return ExitCode.USER_ABORT
    return ExitCode.SUCCESS if result.ready else ExitCode.NOT_READY


def exit_code_for(error: ReqdriveError) -> ExitCode:
    """The code EXIT_CODES gives the failure's kind; GENERAL_ERROR for any other."""
    for kind, code in EXIT_CODES:
        if isinstance(error, kind):
            return code
    return ExitCode.GENERAL_ERROR
