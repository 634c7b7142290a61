"""What every agent runner shares: the call, its outcome, the protocol and the process body."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from worker.confine.gate_homes import TRUST_VARIABLES
from worker.confine.processes import ProcessOutcome, run_process
from worker.confine.redact import Redactor
from worker.confine.safe_paths import fresh_folder
from worker.confine.sandbox import Sandbox, tool_paths
from worker.exceptions import AgentError

# What an agent may see of the worker's environment: enough to run tools, its own API
# credentials and a git identity, nothing that reaches GitHub, Redis or the App's key.
ALLOWED_VARIABLES = frozenset(
    {
        "PATH",
        "LANG",
        "TZ",
        "TERM",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_MODEL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        # `codex exec` reads its API key from here as well as OPENAI_API_KEY.
        "CODEX_API_KEY",
    }
)
ALLOWED_PREFIXES = ("LC_", "CLAUDE_CODE_", "GIT_AUTHOR_", "GIT_COMMITTER_")
# Allowed variables holding credentials: their values are hidden from every log.
SECRET_NAME_PARTS = ("KEY", "TOKEN", "SECRET")


@dataclass(frozen=True)
class AgentCall:
    """One agent invocation: what to read, where to work, where to log, how long."""

    prompt_file: Path  # the rendered prompt (also given on stdin)
    cwd: Path  # the worktree the agent works in
    # The hand-over folder: planning writes prd.json here. Not the run folder, which holds
    # the checkpoint and logs the agent must not reach.
    run_dir: Path
    home_dir: Path  # per-run HOME (and TMPDIR under it)
    log_path: Path  # iteration-N.log, written redacted
    timeout_s: float
    model: str | None = None
    max_turns: int = 30
    # The call's sandbox (worktree, HOME, hand-over folder, prompt bound); None: unconfined.
    sandbox: Sandbox | None = None
    # A blind reviewer's call: it reads the change and writes its report, nothing else (a
    # runner that can scope its tools gives it only those; claude does).
    read_only: bool = False


@dataclass(frozen=True)
class AgentOutcome:
    """How an agent call ended; `ok` says whether the worker may go on to check its work."""

    exit_code: int | None
    timed_out: bool
    duration_s: float
    cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    result_text: str = ""  # claude's final "result", else the output tail
    error: str | None = None  # e.g. "permission denied: Write" from permission_denials
    denials: tuple[str, ...] = ()  # tool calls the agent was refused ("Write /etc/x")

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and self.error is None


class AgentRunner(Protocol):
    """Runs a coding agent on one prompt in one worktree."""

    name: str

    def run(self, call: AgentCall, *, cancel: threading.Event | None = None) -> AgentOutcome: ...


@dataclass(frozen=True)
class AgentSettings:
    """Which agent to run and how, from the repo config's "agent" and the service settings."""

    runner: str = "claude"  # claude | codex | aider | command
    model: str | None = None
    timeout_s: float = 1800
    # Template for the command runner with "{prompt_file}", "{cwd}", "{run_dir}" placeholders.
    # It is split with shlex first and the placeholders are filled inside each argument, so a
    # path with spaces or shell syntax stays one argument and is never parsed as a command.
    command: str | None = None


def agent_environment(
    home: Path, source_env: Mapping[str, str], *, redactor: Redactor | None = None
) -> dict[str, str]:
    """The agent's whole environment: allowlisted variables (the certificates the worker
    trusts among them: Node, which Claude Code runs on, reads no system store), HOME and
    TMPDIR of its own.

    With a redactor, the values of the credentials passed on are registered as secrets.
    """
    env = {
        name: value
        for name, value in source_env.items()
        if name in ALLOWED_VARIABLES or name in TRUST_VARIABLES or name.startswith(ALLOWED_PREFIXES)
    }
    env.setdefault("PATH", os.defpath)
    # A link the agent left in its place is replaced: TMPDIR is a real folder of its HOME.
    tmp = fresh_folder(home, "tmp", empty=False)
    env["HOME"] = str(home)
    env["TMPDIR"] = str(tmp)
    if redactor is not None:
        for name, value in env.items():
            if any(part in name for part in SECRET_NAME_PARTS):
                redactor.add_secret(value)
    return env


class ProcessRunner:
    """Shared body of the runners: start one CLI through run_process and judge what it left.

    Subclasses say how (`argv`, `environment`), check their settings (`check`) and read the
    result (`outcome`); starting, timing out and stopping the process happens only here.
    """

    name = "process"
    # The model the blind review asks for by default: a cheaper one where the runner has one.
    review_model: str | None = None
    # The variables that name the model API's base URL, each with the URL used when it is
    # unset (None: none). With REQDRIVE_SANDBOX_NETWORK=api these hosts are all a call reaches.
    api_url_variables: tuple[tuple[str, str | None], ...] = (
        ("ANTHROPIC_BASE_URL", None),
        ("OPENAI_BASE_URL", None),
    )

    def __init__(
        self,
        settings: AgentSettings,
        *,
        redactor: Redactor,
        source_env: Mapping[str, str],
        grace_s: float = 5.0,
    ) -> None:
        self.settings = settings
        self.redactor = redactor
        self.source_env = source_env
        self.grace_s = grace_s
        self.check()

    def check(self) -> None:
        """Refuse settings this runner cannot work with (AgentError); nothing by default."""

    def argv(self, call: AgentCall) -> list[str]:
        raise NotImplementedError

    def environment(self, call: AgentCall) -> dict[str, str]:
        return agent_environment(call.home_dir, self.source_env, redactor=self.redactor)

    def api_urls(self, env: Mapping[str, str]) -> list[str]:
        """The model API base URLs this call talks to, from its environment or the defaults."""
        urls = [env.get(name) or default for name, default in self.api_url_variables]
        return [url for url in urls if url]

    def run(self, call: AgentCall, *, cancel: threading.Event | None = None) -> AgentOutcome:
        env = self.environment(call)
        argv = self.argv(call)
        sandbox = call.sandbox
        if sandbox is not None:
            # Found on the agent's PATH out here; inside, only its install folder exists.
            path_var = env.get("PATH", os.defpath)
            argv[0] = shutil.which(argv[0], path=path_var) or argv[0]
            sandbox = sandbox.bind(readonly=tool_paths(argv[0], path_var))
            try:
                sandbox = sandbox.allowing(self.api_urls(env))
            except ValueError as error:
                raise AgentError(f"{self.name} agent: the model API's base URL: {error}") from None
        # The log may hold earlier calls' output; only what this call appends is its own.
        log_start = call.log_path.stat().st_size if call.log_path.exists() else 0
        try:
            process = run_process(
                argv,
                cwd=call.cwd,
                env=env,
                timeout_s=call.timeout_s,
                log_path=call.log_path,
                redactor=self.redactor,
                stdin_path=call.prompt_file,
                grace_s=self.grace_s,
                cancel=cancel,
                sandbox=sandbox,
            )
        except OSError as error:
            raise AgentError(
                f"{self.name} agent could not be started ({argv[0]}): {error}"
            ) from error
        return self.outcome(call, process, log_start)

    def outcome(self, call: AgentCall, process: ProcessOutcome, log_start: int) -> AgentOutcome:
        return AgentOutcome(
            exit_code=process.exit_code,
            timed_out=process.timed_out,
            duration_s=process.duration_s,
            result_text=process.output_tail,
            error=stop_reason(process, call.timeout_s),
        )

    def model(self, call: AgentCall) -> str | None:
        return call.model or self.settings.model


def stop_reason(process: ProcessOutcome, timeout_s: float) -> str | None:
    """Why the worker stopped the process, or None when it ended by itself."""
    if process.timed_out:
        return f"timed out after {timeout_s:g}s"
    if process.cancelled:
        return "cancelled"
    return None


def fill_template(template: Sequence[str], call: AgentCall) -> list[str]:
    """Fill placeholders inside already-split arguments: a value can never add an argument."""
    values = {
        "{prompt_file}": str(call.prompt_file),
        "{cwd}": str(call.cwd),
        "{run_dir}": str(call.run_dir),
    }
    argv = []
    for argument in template:
        for placeholder, value in values.items():
            argument = argument.replace(placeholder, value)
        argv.append(argument)
    return argv
