"""aider as an agent runner."""

from __future__ import annotations

from pathlib import Path

from worker.agents.base import AgentCall, AgentOutcome, ProcessRunner
from worker.confine.processes import ProcessOutcome
from worker.confine.redact import redact_file


class AiderRunner(ProcessRunner):
    """aider with one message from the prompt file, answering yes, never committing itself."""

    name = "aider"
    api_url_variables = (
        ("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
        ("OPENAI_BASE_URL", "https://api.openai.com/v1"),
    )
    executable = "aider"

    def argv(self, call: AgentCall) -> list[str]:
        # The worker commits what the agent leaves, so aider must not commit or touch
        # .gitignore; its history files go to the run's HOME instead of the worktree, where
        # they would otherwise be committed with the story.
        argv = [self.executable, "--yes-always", "--no-auto-commits", "--no-dirty-commits"]
        argv += ["--no-gitignore", "--no-check-update", "--no-show-release-notes"]
        argv += ["--analytics-disable", "--no-pretty", "--no-stream"]
        for flag, path in self.history_files(call).items():
            argv += [flag, str(path)]
        argv += ["--message-file", str(call.prompt_file)]
        model = self.model(call)
        if model:
            argv += ["--model", model]
        return argv

    def history_files(self, call: AgentCall) -> dict[str, Path]:
        return {
            "--chat-history-file": call.home_dir / "aider.chat.history.md",
            "--input-history-file": call.home_dir / "aider.input.history",
        }

    def outcome(self, call: AgentCall, process: ProcessOutcome, log_start: int) -> AgentOutcome:
        # The histories hold the whole conversation; the run's HOME may sit in the run folder.
        for path in self.history_files(call).values():
            redact_file(path, self.redactor)
        return super().outcome(call, process, log_start)
