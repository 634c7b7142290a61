"""Run a child process in its own group, stream its output redacted, stop all of it."""

# CONTRACT (implemented by the agents/processes helper):
#
# @dataclass(frozen=True)
# class ProcessOutcome:
#     exit_code: int | None       # None when killed at the timeout or cancelled
#     timed_out: bool
#     duration_s: float
#     output_tail: str             # last ~64 KiB of combined stdout/stderr, already redacted
#
# def run_process(
#     argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout_s: float,
#     log_path: Path, redactor: Redactor, stdin_path: Path | None = None,
#     grace_s: float = 5.0, cancel: threading.Event | None = None,
# ) -> ProcessOutcome
#
# - start_new_session=True; output (stdout+stderr merged) streamed line by line through
#   redactor.redact() into log_path (appending), never unredacted to disk.
# - On timeout or cancel: SIGTERM to the group, wait grace_s, SIGKILL the group, then find and
#   kill every process still carrying this call's marker in its environment
#   (REQDRIVE_PROCESS_MARK=<uuid>, added to env here) — this catches what the child started in
#   a new session with setsid (the Claude Code CLI does that for its shell commands).
# - Also after a normal exit, processes left behind with the marker are killed: nothing an
#   agent or a gate started outlives its call.
