"""The command runner: any executable, from a template the service settings give."""

from __future__ import annotations

import shlex

from worker.agents.base import AgentCall, ProcessRunner, fill_template
from worker.exceptions import AgentError


class CommandRunner(ProcessRunner):
    """Any executable, from a template; the prompt arrives on stdin and as {prompt_file}."""

    name = "command"

    def check(self) -> None:
        command = self.settings.command
        if not command or not command.strip():
            raise AgentError("the command agent needs a command template (REQDRIVE_AGENT_COMMAND)")
        try:
            self.template = shlex.split(command)
        except ValueError as error:
            raise AgentError(f"agent command template cannot be parsed: {error}") from error

    def argv(self, call: AgentCall) -> list[str]:
        return fill_template(self.template, call)
