"""The runners by name, and the one place that picks a runner from the settings."""

from __future__ import annotations

from collections.abc import Mapping

from worker.agents.aider import AiderRunner
from worker.agents.base import AgentRunner, AgentSettings, ProcessRunner
from worker.agents.claude import ClaudeRunner
from worker.agents.codex import CodexRunner
from worker.agents.command import CommandRunner
from worker.confine.redact import Redactor
from worker.exceptions import AgentError

RUNNERS: dict[str, type[ProcessRunner]] = {
    ClaudeRunner.name: ClaudeRunner,
    CodexRunner.name: CodexRunner,
    AiderRunner.name: AiderRunner,
    CommandRunner.name: CommandRunner,
}


def make_runner(
    settings: AgentSettings, *, redactor: Redactor, source_env: Mapping[str, str]
) -> AgentRunner:
    """The runner settings.runner names; an unknown name or a missing template is an error."""
    runner = RUNNERS.get(settings.runner)
    if runner is None:
        *others, last = RUNNERS
        raise AgentError(
            f"unknown agent runner {settings.runner!r}: use {', '.join(others)} or {last}"
        )
    return runner(settings, redactor=redactor, source_env=source_env)
