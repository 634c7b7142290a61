"""OpenAI's Codex CLI as an agent runner."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from worker.agents.base import AgentCall, AgentOutcome, ProcessRunner
from worker.confine.processes import ProcessOutcome
from worker.confine.redact import redact_file


class CodexRunner(ProcessRunner):
    """OpenAI's `codex exec`, non-interactive, allowed to write in the worktree."""

    name = "codex"
    api_url_variables = (("OPENAI_BASE_URL", "https://api.openai.com/v1"),)
    executable = "codex"

    def argv(self, call: AgentCall) -> list[str]:
        # `exec` never asks for approval; `--sandbox workspace-write` lets it edit the worktree
        # (the older spelling `--full-auto` is deprecated). Planning writes prd.json in the run
        # folder, hence --add-dir. "-" reads the prompt from stdin, which is the prompt file.
        argv = [self.executable, "exec", "--sandbox", "workspace-write", "--cd", str(call.cwd)]
        argv += ["--add-dir", str(call.run_dir), "--skip-git-repo-check", "--color", "never"]
        # No session rollout files: they would keep the unredacted conversation on disk.
        argv += ["--ephemeral"]
        argv += ["--output-last-message", str(self.last_message_path(call))]
        model = self.model(call)
        if model:
            argv += ["--model", model]
        return [*argv, "-"]

    def last_message_path(self, call: AgentCall) -> Path:
        # codex writes it itself: in the hand-over folder, the one place outside the worktree
        # it may write to.
        return call.run_dir / "codex-last-message.md"

    def outcome(self, call: AgentCall, process: ProcessOutcome, log_start: int) -> AgentOutcome:
        outcome = super().outcome(call, process, log_start)
        final = redact_file(self.last_message_path(call), self.redactor)
        return outcome if final is None else replace(outcome, result_text=final)
