"""The Claude Code CLI as an agent runner: headless, scoped tools, cost from its result line."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.agents.base import AgentCall, AgentOutcome, ProcessRunner, stop_reason
from worker.confine.processes import ProcessOutcome
from worker.confine.safe_paths import fresh_folder
from worker.exceptions import AgentError
from worker.git.runner import COMMITTER_EMAIL, COMMITTER_NAME

# Bash rules for implementing a story and running its tests. A rule covers a command with any
# arguments (and none); each part of `a && b` or `a | b` needs its own. These rules are not a
# sandbox (`git -c alias.x='!cmd' x` runs anything): what protects secrets is that the
# environment holds none, so the list aims at letting the agent work, not at confining it.
BASH_COMMAND_GROUPS = (
    "git status, git diff, git log, git show, git add, git commit, git rm, git mv, git restore",
    "git ls-files, git grep, git rev-parse, git branch",
    "ls, cat, head, tail, wc, grep, find, sort, mkdir, touch, pwd, echo, cd, true, test",
    "python, python3, pytest, ruff, mypy, tox, uv run",
    "node, npm test, npm run, npx, yarn test, pnpm test",
    "make, go test, go build, go vet, cargo test, cargo build, cargo check",
)
DEFAULT_BASH_COMMANDS = tuple(c for group in BASH_COMMAND_GROUPS for c in group.split(", "))
# No file tools here: acceptEdits lets Write and Edit reach the worktree and --add-dir folders
# only, while naming "Write" or "Read" in --allowedTools would open every path on the machine.
DEFAULT_ALLOWED_TOOLS = tuple(f"Bash({command} *)" for command in DEFAULT_BASH_COMMANDS)

# A blind reviewer's only tools (`--tools`: the CLI offers the model no other): it reads the
# change and writes its report. No Bash (every interpreter in the implementer's list runs the
# change's code), no Edit. Write reaches only the call's folder and --add-dir, which for a
# reviewer are its view of the change (read-only in the sandbox) and its hand-over folder.
REVIEW_TOOLS = ("Read", "Grep", "Glob", "Write")

# Retries of a failed API call: the CLI's default retries a 401 for minutes.
MAX_API_RETRIES = "2"
TAIL_CHARS = 2000


@dataclass(frozen=True)
class ClaudeResult:
    """The fields reqdrive uses from the CLI's final `{"type": "result"}` line."""

    subtype: str
    terminal_reason: str
    is_error: bool
    text: str
    cost_usd: float | None
    input_tokens: int | None
    output_tokens: int | None
    denials: tuple[str, ...]


class ClaudeRunner(ProcessRunner):
    """Runs `claude -p` on a prompt file in a worktree and reports what it cost."""

    name = "claude"
    review_model = "haiku"  # the CLI's alias for its fastest, cheapest model
    api_url_variables = (("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),)
    executable = "claude"
    allowed_tools: tuple[str, ...] = DEFAULT_ALLOWED_TOOLS

    def argv(self, call: AgentCall) -> list[str]:
        """The command line; the prompt goes on stdin so no argument parsing can eat it."""
        argv = [self.executable, "-p", "--output-format", "stream-json", "--verbose"]
        argv += ["--permission-mode", "acceptEdits"]
        if call.read_only:
            argv += ["--tools", ",".join(REVIEW_TOOLS)]
        elif self.allowed_tools:  # the option takes a list, so it must not stand empty
            argv += ["--allowedTools", *self.allowed_tools]
        # Planning writes prd.json in the run folder, outside the worktree.
        argv += ["--add-dir", str(call.run_dir), "--max-turns", str(call.max_turns)]
        # A saved session would hold the whole unredacted conversation in the run's HOME, and
        # MCP servers a repository declares would be programs we never meant to start.
        argv += ["--no-session-persistence", "--strict-mcp-config"]
        # Only the user settings, from a config folder emptied before every call: a
        # repository's .claude/settings*.json (permissions, hooks) and whatever an earlier
        # call left in HOME never widen what the agent may run beyond --allowedTools.
        argv += ["--setting-sources", "user"]
        model = self.model(call)
        if model:
            argv += ["--model", model]
        return argv

    def environment(self, call: AgentCall) -> dict[str, str]:
        # The redactor learns the API key's value here: a tool may print it (`env`).
        env = super().environment(call)
        # Without this the CLI writes under /tmp/claude-<uid>/, shared by every run.
        env["CLAUDE_CODE_TMPDIR"] = env["TMPDIR"]
        env["CLAUDE_CONFIG_DIR"] = str(config_dir(call))
        env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
        env["DISABLE_TELEMETRY"] = "1"
        env["DISABLE_AUTOUPDATER"] = "1"
        env.setdefault("CLAUDE_CODE_MAX_RETRIES", MAX_API_RETRIES)
        # Its Bash tool's git sees the run's empty HOME, so commits need an identity from here.
        for role in ("AUTHOR", "COMMITTER"):
            env.setdefault(f"GIT_{role}_NAME", COMMITTER_NAME)
            env.setdefault(f"GIT_{role}_EMAIL", COMMITTER_EMAIL)
        return env

    def run(self, call: AgentCall, *, cancel: threading.Event | None = None) -> AgentOutcome:
        path = self.source_env.get("PATH", os.defpath)
        if shutil.which(self.executable, path=path) is None:
            raise AgentError(
                f"the Claude Code CLI ({self.executable}) is not on PATH; install it with "
                "`npm install -g @anthropic-ai/claude-code`"
            )
        # Fresh for every call: nothing the agent wrote there last time (settings, hooks)
        # is read this time.
        fresh_folder(call.home_dir, config_dir(call).name)  # a link there is replaced
        return super().run(call, cancel=cancel)

    def outcome(self, call: AgentCall, process: ProcessOutcome, log_start: int) -> AgentOutcome:
        return outcome_of(process, read_result(call.log_path, log_start), call.timeout_s)


def config_dir(call: AgentCall) -> Path:
    """The CLI's own config folder (CLAUDE_CONFIG_DIR) for one call, in the run's HOME."""
    return call.home_dir / ".claude-config"


def read_result(log_path: Path, start: int) -> ClaudeResult | None:
    """The last result line this call appended to the (already redacted) log."""
    if not log_path.exists():
        return None
    with log_path.open("rb") as log:
        log.seek(start)
        lines = log.read().decode("utf-8", errors="replace").splitlines()
    for line in reversed(lines):
        event = _json_object(line)
        if event is not None and event.get("type") == "result":
            return parse_result(event)
    return None


def _json_object(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def parse_result(event: Mapping[str, Any]) -> ClaudeResult:
    """Pick cost, tokens and denials out of a result event; absent fields stay None."""
    usage = event.get("usage") or {}
    cost = event.get("total_cost_usd")
    return ClaudeResult(
        subtype=str(event.get("subtype", "")),
        terminal_reason=str(event.get("terminal_reason") or ""),
        is_error=bool(event.get("is_error", False)),
        text=str(event.get("result", "")),
        cost_usd=float(cost) if isinstance(cost, int | float) else None,
        input_tokens=_input_tokens(usage),
        output_tokens=_int_or_none(usage.get("output_tokens")),
        denials=tuple(_describe_denial(d) for d in event.get("permission_denials") or ()),
    )


def _input_tokens(usage: Mapping[str, Any]) -> int | None:
    # Claude Code reads most of its context from the prompt cache; `input_tokens` alone counts
    # only the uncached part, so the cached reads and writes are added to show what was sent.
    parts = [
        _int_or_none(usage.get(key))
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    ]
    if parts[0] is None:
        return None
    return sum(p for p in parts if p is not None)


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _describe_denial(denial: Mapping[str, Any]) -> str:
    """`Write /path` or `Bash curl ...`: the tool and what it was refused for."""
    tool = str(denial.get("tool_name", "?"))
    tool_input = denial.get("tool_input") or {}
    target = tool_input.get("file_path") or tool_input.get("command") or ""
    return f"{tool} {str(target)[:200]}".strip()


def outcome_of(
    process: ProcessOutcome, result: ClaudeResult | None, timeout_s: float
) -> AgentOutcome:
    """Turn the process and its result line into one outcome with a reason when it failed."""
    stopped = stop_reason(process, timeout_s)
    errors = [stopped] if stopped else []
    if result is None:
        tail = process.output_tail[-TAIL_CHARS:]
        if not errors:
            errors.append(f"no result line (exit code {process.exit_code}); output tail:\n{tail}")
        return AgentOutcome(
            exit_code=process.exit_code,
            timed_out=process.timed_out,
            duration_s=process.duration_s,
            result_text=tail,
            error=errors[0],
        )
    if result.is_error:
        # An API failure still says subtype "success"; terminal_reason names it ("api_error").
        reason = result.terminal_reason or result.subtype or "error"
        errors.append(f"claude stopped ({reason}): {result.text[:500]}")
    if result.denials:
        # The exit code stays 0 when tools were refused, so this is the only sign of it.
        errors.append("permission denied: " + "; ".join(result.denials))
    return AgentOutcome(
        exit_code=process.exit_code,
        timed_out=process.timed_out,
        duration_s=process.duration_s,
        cost_usd=result.cost_usd,
        input_tokens=result.input_tokens,
        output_tokens=result.output_tokens,
        result_text=result.text,
        error="; ".join(errors) or None,
        denials=result.denials,
    )


class StreamedUsage:
    """The tokens of the replies a running call has streamed so far (`assistant` events of
    its stream-json log), read as the log grows: each message once, however many of its
    content blocks the CLI printed. An estimate between turns; its result line has the cost.
    `turn_pending`: the CLI gave the model tool results (a `user` event) and waits for its next
    reply, so the call is between two turns, not ending."""

    def __init__(self, log_path: Path, start: int) -> None:
        self.log_path = log_path
        self.position = start
        self.partial = b""
        self.messages: dict[str, tuple[int, int]] = {}
        self.turn_pending = False

    def read(self) -> tuple[int, int]:
        """(input tokens, output tokens) of every reply streamed until now."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self.position)
                chunk = log.read()
        except FileNotFoundError:
            return self.total()
        self.position += len(chunk)
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        for line in lines:
            event = _json_object(line.decode("utf-8", errors="replace")) or {}
            if event.get("type") in ("user", "assistant"):
                self.turn_pending = event["type"] == "user"
            message = event.get("message") if event.get("type") == "assistant" else None
            if isinstance(message, dict) and isinstance(message.get("usage"), dict):
                usage = message["usage"]
                tokens = (_input_tokens(usage) or 0, _int_or_none(usage.get("output_tokens")) or 0)
                known = self.messages.get(str(message.get("id")), (0, 0))
                self.messages[str(message.get("id"))] = (
                    max(known[0], tokens[0]),
                    max(known[1], tokens[1]),
                )
        return self.total()

    def total(self) -> tuple[int, int]:
        return (
            sum(tokens for tokens, _ in self.messages.values()),
            sum(tokens for _, tokens in self.messages.values()),
        )
