"""Measure what the sandbox costs per agent call, beside the same call unconfined.

Every call goes through the runner the App uses (ProcessRunner → run_process), with the
bindings a run gives it (worktree, HOME, hand-over folder, prompt, the agent's own git view,
rebuilt for every call as the pipeline does). Four agents, each timed unconfined, in the
sandbox as the App makes it by default (REQDRIVE_SANDBOX_NETWORK=open), and in the sandbox with
egress limited to the model's API (`api`), alternating call by call. Both sandboxed ways give
the call a network namespace of its own, and start the egress proxy and the relay in front of
the agent for every call; they differ only in what the proxy lets through.

- `true`: an agent that does nothing (the fixed cost of starting a confined process);
- `git`: a shell agent that writes a file and runs `git status` and `git add` on its view;
- `http`: a shell agent that sends 10 requests with curl to the "model API" (a local HTTP
  server, reached through the proxy);
- `claude`: the real Claude Code CLI (tests/support installs the pinned version with npm) doing
  one Write and one Bash turn against a scripted Messages API on 127.0.0.1.

    .venv/bin/python -m bench.sandbox            # 40 calls per cell, 8 for claude
    .venv/bin/python -m bench.sandbox --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from tempfile import TemporaryDirectory

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.claude_cli import install_claude_cli  # noqa: E402
from tests.support.fake_anthropic import ToolCall, Turn, fake_anthropic, say, use  # noqa: E402
from worker.agents.base import AgentCall, AgentSettings  # noqa: E402
from worker.agents.registry import make_runner  # noqa: E402
from worker.confine.redact import Redactor  # noqa: E402
from worker.confine.sandbox import Sandbox, SandboxMode, SandboxNetwork, make_sandbox  # noqa: E402
from worker.git.cache import RepositoryCache  # noqa: E402
from worker.git.worktree import Worktree  # noqa: E402

GIT_AGENT = "#!/bin/sh\necho change >> notes.txt\ngit status --porcelain >/dev/null\ngit add -A\n"
HTTP_AGENT = (
    "#!/bin/sh\nfor n in 1 2 3 4 5 6 7 8 9 10; do\n"
    '  curl -sf -o /dev/null "$ANTHROPIC_BASE_URL/v1/ping" || exit 1\ndone\n'
)
# How each call is confined: unconfined, the default sandbox (`open`), egress limited (`api`).
MODES = ("bare", "open", "api")


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


class Bench:
    """A prepared worktree and everything a call binds, in a temporary work dir."""

    def __init__(self, work: Path) -> None:
        self.work = work
        source = work / "source"
        source.mkdir()
        git(source, "init", "-q", "-b", "main")
        for n in range(200):
            (source / f"file_{n}.txt").write_text(f"line {n}\n" * 20)
        git(source, "add", "-A")
        git(source, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "base")
        self.cache = RepositoryCache(work / "cache")
        self.worktree: Worktree = self.cache.prepare(
            str(source), branch="reqdrive/bench", base_ref="main", run_id="bench"
        )
        self.home, self.handoff = work / "home", work / "handoff"
        self.handoff.mkdir()
        self.prompt = work / "prompt.md"
        self.prompt.write_text("Implement the story.\n")
        sandbox = make_sandbox(SandboxMode.ON)
        limited = make_sandbox(SandboxMode.ON, network=SandboxNetwork.API)
        assert sandbox is not None and limited is not None
        self.sandboxes: dict[str, Sandbox] = {"open": sandbox, "api": limited}

    def call(self, mode: str) -> AgentCall:
        call = AgentCall(
            prompt_file=self.prompt,
            cwd=self.worktree.path,
            run_dir=self.handoff,
            home_dir=self.home,
            log_path=self.work / "agent.log",
            timeout_s=120,
            model="claude-sonnet-4-5",
            max_turns=5,
        )
        if mode == "bare":
            return call
        view = self.cache.agent_view(self.worktree, self.work / "gitview")
        return replace(
            call,
            sandbox=self.sandboxes[mode].bind(
                writable=[self.home, self.handoff, view.git_dir],
                readonly=[view.objects, self.prompt],
                shadows=[(view.git_file, self.worktree.path / ".git")],
            ),
        )


def time_calls(
    run_one: Callable[[str], None], count: int, worktree: Path
) -> dict[str, list[float]]:
    """Seconds per call in each mode, alternating; the worker's reset of the worktree between
    calls is not timed."""
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for mode in MODES:  # warm file caches once
        run_one(mode)
        reset(worktree)
    for _ in range(count):
        for mode in MODES:
            started = time.perf_counter()
            run_one(mode)
            times[mode].append(time.perf_counter() - started)
            reset(worktree)
    return times


def reset(worktree: Path) -> None:
    git(worktree, "reset", "-q", "--hard")
    git(worktree, "clean", "-qfd")


@contextlib.contextmanager
def model_api() -> Iterator[str]:
    """A local HTTP server standing in for the model's API: answers every GET with 2 bytes."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def command_agent(bench: Bench, program: Path, api_url: str) -> Callable[[str], None]:
    settings = AgentSettings(runner="command", command=str(program), timeout_s=60)
    # The API's URL names the endpoint the egress proxy allows by name (on the worker's loopback).
    env = {"PATH": "/usr/bin:/bin", "ANTHROPIC_BASE_URL": api_url}
    runner = make_runner(settings, redactor=Redactor(), source_env=env)

    def run_one(mode: str) -> None:
        outcome = runner.run(bench.call(mode))
        if outcome.exit_code != 0:
            raise SystemExit(f"the agent failed: {outcome.result_text[-500:]}")

    return run_one


def claude_agent(bench: Bench, url: str) -> Callable[[str], None]:
    binary = install_claude_cli()
    env = {
        "PATH": f"{binary.parent}:/usr/bin:/bin",
        "ANTHROPIC_API_KEY": "bench-key-not-secret",
        "ANTHROPIC_BASE_URL": url,
    }
    runner = make_runner(AgentSettings(runner="claude"), redactor=Redactor(), source_env=env)

    def run_one(mode: str) -> None:
        outcome = runner.run(bench.call(mode))
        if not outcome.ok:
            raise SystemExit(f"claude failed: {outcome.error}")

    return run_one


def claude_script(bench: Bench, calls: int) -> list[Turn]:
    target = str(bench.worktree.path / "greet.py")
    turn = [
        use(ToolCall("Write", {"file_path": target, "content": "x = 1\n"})),
        use(ToolCall("Bash", {"command": "git status --porcelain"})),
        say("done"),
    ]
    return turn * calls


# The table's columns: medians, what each sandbox adds to the median, ratios, 90th percentiles.
COLUMNS = (
    "agent",
    "calls each",
    "unconfined ms",
    "open ms",
    "api ms",
    "open added ms",
    "open / unconfined",
    "api added ms",
    "api / unconfined",
    "unconfined p90",
    "open p90",
    "api p90",
)


def row(name: str, times: dict[str, list[float]]) -> str:
    bare, boxed, limited = (statistics.median(times[mode]) * 1000 for mode in MODES)
    p90 = [statistics.quantiles(times[mode], n=10)[-1] * 1000 for mode in MODES]
    cells = [name, str(len(times["bare"])), f"{bare:.1f}", f"{boxed:.1f}", f"{limited:.1f}"]
    cells += [f"{boxed - bare:+.1f}", f"{boxed / bare:.2f}", f"{limited - bare:+.1f}"]
    cells += [f"{limited / bare:.2f}", *(f"{value:.1f}" for value in p90)]
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-claude", action="store_true", help="skip the Claude Code CLI row")
    args = parser.parse_args()
    count, claude_count = (5, 2) if args.quick else (40, 8)
    rows = []
    with TemporaryDirectory(prefix="reqdrive-bench-sandbox-") as tmp:
        bench = Bench(Path(tmp))
        agents = (("true", "#!/bin/sh\nexit 0\n"), ("git", GIT_AGENT), ("http", HTTP_AGENT))
        with model_api() as api_url:
            for name, script in agents:
                program = Path(tmp) / f"agent-{name}"
                program.write_text(script)
                program.chmod(0o755)
                agent = command_agent(bench, program, api_url)
                rows.append(row(name, time_calls(agent, count, bench.worktree.path)))
        if not args.no_claude:
            total = (claude_count + 1) * len(MODES)
            with fake_anthropic(claude_script(bench, total)) as server:
                agent = claude_agent(bench, server.url)
                rows.append(row("claude", time_calls(agent, claude_count, bench.worktree.path)))
    print("| " + " | ".join(COLUMNS) + " |")
    print("| --- |" + " ---: |" * (len(COLUMNS) - 1))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
