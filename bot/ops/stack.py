"""`reqdrive up`: Redis when none is configured, the web server and one worker, stopped together."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import psutil
from dotenv import load_dotenv

from bot.exceptions import ConfigurationError
from bot.ops.embedded_redis import EmbeddedRedis
from bot.ops.logs import configure_from
from bot.ops.settings import load_settings
from bot.ops.startup import (
    StackLock,
    app_credentials_problem,
    ensure_port_free,
    ensure_redis_answers,
)

POLL_S = 0.2
STOP_S = 10.0
# RQ ignores a second stop signal that comes within a second of the first (worker pools send
# duplicates), so the one that asks for a cold shutdown waits this long after the first.
RQ_SIGNAL_DEBOUNCE_S = 1.2
LOG_TAIL_LINES = 10
LOG_FORMAT_VARIABLE = "REQDRIVE_LOG_FORMAT"
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


@dataclass
class Child:
    """One supervised process, leader of its own process group."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass(frozen=True)
class StopRequests:
    """The first SIGINT/SIGTERM asks for a graceful stop; a second one for an immediate one."""

    graceful: threading.Event
    now: threading.Event


def run_stack(host: str, port: int, grace_s: float) -> int:
    """Start everything, wait for Ctrl-C/SIGTERM or a death, stop everything; the exit code.

    After Ctrl-C a running job gets `grace_s` to finish; then RQ's cold shutdown kills it.
    """
    load_dotenv(Path.cwd() / ".env", override=False)  # real environment variables win
    settings = load_settings()
    configure_from(settings)
    problem = app_credentials_problem(settings)
    if problem is not None and problem[0]:
        raise ConfigurationError(problem[1])
    work_dir = settings.reqdrive_work_dir
    # One stack per folder: a second would share the embedded Redis's socket and data file.
    lock = StackLock(work_dir)
    lock.acquire(f"webhook URL http://{host}:{port}/webhook")
    try:
        ensure_port_free(host, port)
        if settings.redis_url:
            ensure_redis_answers(settings.redis_url, configured=True, command="up")
        if problem is not None:
            print(f"reqdrive up: warning: {problem[1]}", file=sys.stderr, flush=True)
        _adopt_orphans()
        return _run(settings.redis_url, work_dir, host, port, grace_s)
    finally:
        lock.release()


def _run(redis_url: str | None, work_dir: Path, host: str, port: int, grace_s: float) -> int:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # The children log to files a developer reads (tail -f): readable lines unless told otherwise.
    env.setdefault(LOG_FORMAT_VARIABLE, "text")
    embedded: EmbeddedRedis | None = None
    children: list[Child] = []
    with _stop_requested() as stop:
        try:
            if not redis_url:
                # Absolute: redis-server changes into its --dir before opening its log file.
                embedded = EmbeddedRedis(work_dir.resolve() / "redis", append_only=True)
                env["REDIS_URL"] = embedded.start()
            logs = work_dir / "logs"
            serve = ["serve", "--host", host, "--port", str(port)]
            children.append(_start("web", serve, env, logs))
            children.append(_start("worker", ["worker"], env, logs))
            _announce(host, port, embedded, children)
            return _supervise(children, embedded, stop.graceful, _health_url(host, port))
        finally:
            _stop_all(children, embedded, grace_s, stop.now)
            _sweep_leftovers()


@contextmanager
def _stop_requested() -> Iterator[StopRequests]:
    """Events set by SIGINT or SIGTERM, instead of KeyboardInterrupt mid-startup."""
    stop = StopRequests(threading.Event(), threading.Event())

    def request(_signum: int, _frame: object) -> None:
        (stop.now if stop.graceful.is_set() else stop.graceful).set()

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, request)
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _start(name: str, command: list[str], env: dict[str, str], logs: Path) -> Child:
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    with log.open("ab") as out:
        # A process group of its own: the terminal's Ctrl-C reaches only `up`, which then
        # stops each child its own way (the worker warm, Redis after it) instead of all at once.
        process = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", *command],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            process_group=0,
        )
    return Child(name, process, log)


def _announce(host: str, port: int, embedded: EmbeddedRedis | None, children: list[Child]) -> None:
    for redis_child in _redis_child(embedded):
        print(f"  redis   pid {redis_child.process.pid}  log {redis_child.log}", flush=True)
    if embedded is None:
        print("  redis   REDIS_URL (not started here)", flush=True)
    for child in children:
        print(f"  {child.name:<7} pid {child.process.pid}  log {child.log}", flush=True)
    print(f"Webhook URL: http://{host}:{port}/webhook   (Ctrl-C stops everything)", flush=True)


def _supervise(
    children: list[Child], embedded: EmbeddedRedis | None, stop: threading.Event, health: str
) -> int:
    ready = False
    while not stop.wait(POLL_S):
        _reap_adopted({child.process.pid for child in [*children, *_redis_child(embedded)]})
        dead = [child for child in [*children, *_redis_child(embedded)] if not child.alive()]
        if dead:
            _report_death(dead[0])
            return 1
        if not ready and _answers_ok(health):
            ready = True
            print("reqdrive is up: the web server answers /healthz", flush=True)
    print("reqdrive up: stopping (Ctrl-C again stops running jobs at once)", flush=True)
    return 0


def _redis_child(embedded: EmbeddedRedis | None) -> list[Child]:
    if embedded is None or embedded.process is None:
        return []
    return [Child("redis", embedded.process, embedded.directory / "redis.log")]


def _report_death(child: Child) -> None:
    print(
        f"reqdrive up: {child.name} exited unexpectedly with code {child.process.returncode}; "
        f"stopping the rest. Last lines of {child.log}:",
        file=sys.stderr,
    )
    try:
        lines = child.log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError:
        lines = []
    for line in lines:
        print(f"  {line}", file=sys.stderr)


def _stop_all(
    children: list[Child], embedded: EmbeddedRedis | None, grace_s: float, now: threading.Event
) -> None:
    # Web and worker get their polite signal together; Redis goes last, after the worker
    # has written its job state.
    signalled_at = time.monotonic()
    for child in children:
        if child.alive():
            child.process.send_signal(signal.SIGTERM)  # granian: graceful; RQ: warm shutdown
    for child in children:
        _wait_or_escalate(child, grace_s if child.name == "worker" else STOP_S, now, signalled_at)
    if embedded is not None:
        embedded.stop()


def _wait_or_escalate(
    child: Child, grace_s: float, now: threading.Event, signalled_at: float
) -> None:
    if not _exited_within(child, grace_s, now):
        # A second SIGTERM is RQ's cold shutdown (it kills the job's work horse itself).
        time.sleep(max(0.0, signalled_at + RQ_SIGNAL_DEBOUNCE_S - time.monotonic()))
        child.process.send_signal(signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            child.process.wait(timeout=STOP_S)
    # What the leader left in its group (the web server's workers, RQ's scheduler); a job's work
    # horse has a group of its own and is left to _sweep_leftovers.
    with suppress(ProcessLookupError):
        os.killpg(child.process.pid, signal.SIGKILL)
    child.process.wait()


def _exited_within(child: Child, seconds: float, now: threading.Event) -> bool:
    """Wait for the child to exit; give up at the deadline or when a stop is demanded now."""
    deadline = time.monotonic() + seconds
    while child.alive():
        if now.is_set() or time.monotonic() >= deadline:
            return False
        now.wait(POLL_S)
    return True


def _adopt_orphans() -> None:
    """Become the reaper of orphans below `up` (Linux), so the final sweep still finds them.

    RQ runs each job in a work horse with a process group of its own, and an agent may start
    its own session; when their parent is killed they would otherwise move to init, out of reach.
    """
    if sys.platform.startswith("linux"):
        with suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _reap_adopted(own: set[int]) -> None:
    """Reap the orphans `up` adopted that have ended (a sandbox's bwrap parent, an agent whose
    horse was killed): else each stays a zombie, holding its pid, until `up` stops. Its own
    children are left to their Popen, which reads their exit codes."""
    with suppress(psutil.Error):
        for proc in psutil.Process().children():
            if proc.pid not in own and proc.status() == psutil.STATUS_ZOMBIE:
                with suppress(ChildProcessError):
                    os.waitpid(proc.pid, os.WNOHANG)


def _sweep_leftovers() -> None:
    """Kill and reap whatever still runs below `up`: nothing it started outlives it."""
    for pid in _descendants(os.getpid()):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + STOP_S
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # no children left at all
        if pid == 0:
            time.sleep(0.05)


def _descendants(root: int) -> list[int]:
    """Every process below `root`."""
    try:
        return [p.pid for p in psutil.Process(root).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _health_url(host: str, port: int) -> str:
    # A wildcard address is where the server listens, not one a client can connect to.
    wildcard = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}  # noqa: S104 - compared only
    reachable = wildcard.get(host, host)
    if ":" in reachable:  # an IPv6 literal goes in brackets
        reachable = f"[{reachable}]"
    return f"http://{reachable}:{port}/healthz"


def _answers_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=0.5) as response:  # noqa: S310 - our own server
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False
