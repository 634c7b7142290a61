"""Coding-agent runners behind one protocol: claude, codex, aider and any command."""

# CONTRACT (implemented by the agents/processes helper):
#
# @dataclass(frozen=True)
# class AgentCall:
#     prompt_file: Path        # the rendered prompt (also given on stdin)
#     cwd: Path                # the worktree the agent works in
#     run_dir: Path            # run folder; planning writes prd.json here
#     home_dir: Path           # per-run HOME (and TMPDIR under it)
#     log_path: Path           # iteration-N.log, written redacted
#     timeout_s: float
#     model: str | None = None
#     max_turns: int = 30
#
# @dataclass(frozen=True)
# class AgentOutcome:
#     exit_code: int | None
#     timed_out: bool
#     duration_s: float
#     cost_usd: float | None = None
#     input_tokens: int | None = None
#     output_tokens: int | None = None
#     result_text: str = ""          # claude's final "result", else the output tail
#     error: str | None = None       # e.g. "permission denied: Write" from permission_denials
#     @property ok -> bool           # exit 0, not timed out, no error
#
# class AgentRunner(Protocol):
#     name: str
#     def run(self, call: AgentCall, *, cancel: threading.Event | None = None) -> AgentOutcome
#
# @dataclass(frozen=True)
# class AgentSettings:                     # from repo config "agent" + service settings
#     runner: str = "claude"                # claude | codex | aider | command
#     model: str | None = None
#     timeout_s: float = 1800
#     command: str | None = None            # template for the command runner:
#                                           # "{prompt_file}", "{cwd}", "{run_dir}" placeholders,
#                                           # split with shlex AFTER substitution per argument
#
# def make_runner(settings: AgentSettings, *, redactor: Redactor,
#                 source_env: Mapping[str, str] = os.environ) -> AgentRunner
#
# def agent_environment(home: Path, source_env: Mapping[str, str]) -> dict[str, str]
#     allowlist: PATH, LANG, LC_*, TZ, TERM; HOME=home, TMPDIR=home/tmp; the agents' own keys
#     ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, ANTHROPIC_BASE_URL, ANTHROPIC_MODEL,
#     CLAUDE_CODE_*, OPENAI_API_KEY, OPENAI_BASE_URL, and git identity GIT_AUTHOR_*/
#     GIT_COMMITTER_*; nothing else (no GITHUB_TOKEN, REDIS_URL, GITHUB_PRIVATE_KEY...).
#     The agent key values are added to the redactor as exact secrets.
