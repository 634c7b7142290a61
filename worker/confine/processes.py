"""Run a child process in its own group, stream its output redacted, stop all of it."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import selectors
import signal
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

import psutil

from worker.confine.egress import egress_proxy
from worker.confine.limits import call_limits
from worker.confine.redact import LineRedactor, Redactor, Tail
from worker.confine.sandbox import Sandbox

LOG = logging.getLogger(__name__)
MARK_VAR = "REQDRIVE_PROCESS_MARK"
TAIL_CHARS = 64 * 1024
# A "line" longer than this is flushed without its newline, so binary output cannot grow the
# buffer without bound; a secret straddling that cut would be missed, which 1 MiB makes moot.
MAX_LINE_BYTES = 1024 * 1024
READ_CHUNK = 64 * 1024
# An agent or a test run that prints without end must not fill the disk: past this much of
# its log, output is only kept in the tail (a note in the log says so).
MAX_LOG_BYTES = 64 * 1024 * 1024
POLL_S = 0.05
# Rounds of "find marked processes, kill them": each round also catches what a dying process
# forked between the previous scan and its own death.
SWEEP_ROUNDS = 10


@dataclass(frozen=True)
class ProcessOutcome:
    """How a process ended and the redacted end of what it printed."""

    exit_code: int | None  # None when killed at the timeout or cancelled
    timed_out: bool
    duration_s: float
    output_tail: str  # last ~64 KiB of combined stdout/stderr, already redacted
    cancelled: bool = False


def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    log_path: Path,
    redactor: Redactor,
    stdin_path: Path | None = None,
    grace_s: float = 5.0,
    cancel: threading.Event | None = None,
    sandbox: Sandbox | None = None,
    max_log_bytes: int = MAX_LOG_BYTES,
) -> ProcessOutcome:
    """Run argv with exactly env (plus a marker), stream it redacted to log_path, stop it all.

    With a sandbox, argv runs inside it with cwd writable and env passed in (bwrap itself
    carries only the marker).
    """
    mark = uuid.uuid4().hex
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        stdin = stack.enter_context(_stdin(stdin_path))
        log = stack.enter_context(log_path.open("a", encoding="utf-8"))
        pump = _OutputPump(log, LineRedactor(redactor), max_log_bytes)
        command, child_env = list(argv), {**env, MARK_VAR: mark}
        if sandbox is not None:
            if sandbox.limits_egress:
                # The proxy's refusals go into this call's log, between the agent's lines.
                proxy = stack.enter_context(
                    egress_proxy(sandbox.api_hosts, pump.note, public=sandbox.reaches_public)
                )
                sandbox = replace(sandbox, proxy_socket=proxy.socket_path)
            command, child_env = sandbox.wrap(argv, cwd=cwd, env=child_env, keep=(MARK_VAR,))
            # Outside bwrap: the limits hold for bwrap and everything the call starts in it.
            command = [*stack.enter_context(call_limits(sandbox.limits)).prefix, *command]
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=child_env,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert proc.stdout is not None  # noqa: S101 - PIPE was asked for
        pump.start(proc.stdout)
        try:
            stopped_by = _wait_exit(proc.pid, started + timeout_s, cancel)
            if stopped_by is not None or _leftovers(proc.pid, mark):
                reason = stopped_by or "left behind"
                LOG.info("stopping process tree", extra={"reason": reason, "program": argv[0]})
                _signal_all(proc.pid, mark, signal.SIGTERM)
                _wait_gone(proc.pid, mark, grace_s)
        finally:
            # Also on an exception in the worker itself: nothing started here may outlive it.
            _kill_all(proc.pid, mark)
            proc.wait()  # reaped only now: until here the zombie leader pins the group id
            pump.finish(grace_s)
    return ProcessOutcome(
        exit_code=None if stopped_by else proc.returncode,
        timed_out=stopped_by == "timeout",
        duration_s=time.monotonic() - started,
        output_tail=pump.tail(),
        cancelled=stopped_by == "cancel",
    )


@contextlib.contextmanager
def _stdin(path: Path | None) -> Iterator[IO[bytes] | int]:
    if path is None:
        yield subprocess.DEVNULL
        return
    with path.open("rb") as handle:
        yield handle


def _wait_exit(pid: int, deadline: float, cancel: threading.Event | None) -> str | None:
    """Wait for the child to exit; return why it must be stopped ("timeout"/"cancel"), else None.

    The child is left a zombie (WNOWAIT) so its pid, which is also its group id, cannot be
    reused by an unrelated process while we still signal the group.
    """
    while not _exited(pid):
        if cancel is not None and cancel.is_set():
            return "cancel"
        if time.monotonic() >= deadline:
            return "timeout"
        if cancel is None:
            time.sleep(POLL_S)
        else:
            cancel.wait(POLL_S)
    return None


def _exited(pid: int) -> bool:
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _signal_all(pgid: int, mark: str, sig: signal.Signals) -> None:
    """Signal the child's process group and every process carrying this call's marker."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    for pid in marked_pids(mark):
        _signal_pid(pid, mark, sig)


def _wait_gone(pgid: int, mark: str, grace_s: float) -> None:
    """Give everything up to grace_s to exit after SIGTERM."""
    deadline = time.monotonic() + grace_s
    while _leftovers(pgid, mark) and time.monotonic() < deadline:
        time.sleep(POLL_S)


def _kill_all(pgid: int, mark: str) -> None:
    """SIGKILL the group and the marked processes until none of them is left running."""
    for _ in range(SWEEP_ROUNDS):
        if not _leftovers(pgid, mark):
            return
        _signal_all(pgid, mark, signal.SIGKILL)
        time.sleep(POLL_S)


def _leftovers(pgid: int, mark: str) -> bool:
    """Whether any live process is in the child's group or carries its marker."""
    # Whether a process is alive is asked only of one that is ours: reading every process's
    # state cost as much as the rest of the scan, twice or more per process run.
    return any(
        (_pgid_of(p.pid) == pgid or _mark_of(p) == mark) and _alive(p)
        for p in psutil.process_iter()
    )


def marked_pids(mark: str) -> list[int]:
    """Pids of live (non-zombie) processes whose environment holds this call's marker."""
    return [p.pid for p in marked_processes() if _mark_of(p) == mark]


def marked_processes() -> list[psutil.Process]:
    """Live processes started through run_process (any call): they carry a marker."""
    return [p for p in _live_processes() if _mark_of(p) is not None]


def _signal_pid(pid: int, mark: str, sig: signal.Signals) -> None:
    # A pidfd pins the process, so a pid reused between scan and signal is never hit: the
    # marker is re-read through the pinned pid before signalling.
    try:
        fd = os.pidfd_open(pid)
    except OSError as error:
        if error.errno == errno.ENOSYS:  # kernels before 5.3: no pinning, signal by pid
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        return
    try:
        if _mark_of(psutil.Process(pid)) == mark:
            signal.pidfd_send_signal(fd, sig)
    except (OSError, psutil.Error):  # gone since the scan: nothing to signal
        pass
    finally:
        os.close(fd)


def _live_processes() -> list[psutil.Process]:
    return [process for process in psutil.process_iter() if _alive(process)]


def _alive(process: psutil.Process) -> bool:
    """Neither a zombie nor dead, nor gone already."""
    try:
        return process.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return False


def _pgid_of(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:  # gone already
        return -1


def _mark_of(process: psutil.Process) -> str | None:
    """The run_process marker in a process's environment, if it is ours to read."""
    try:
        return process.environ().get(MARK_VAR)
    except psutil.Error:  # another user's process, or gone already
        return None


class _OutputPump:
    """Copies the child's output to the log one redacted line at a time, keeping a tail."""

    def __init__(self, log: IO[str], lines: LineRedactor, max_log_bytes: int) -> None:
        self._stream: IO[bytes] | None = None
        self._log = log
        # The pump's thread and the egress proxy's (notes) write the same log.
        self._lock = threading.Lock()
        self._lines = lines
        self._log_room = max_log_bytes
        self._tail = Tail(TAIL_CHARS)
        # Past the log's limit: the last lines as read, redacted only when the tail is asked
        # for, so a flood costs one plain scan per line instead of redacting every byte.
        self._unread: deque[bytes] = deque()
        self._unread_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="output-pump", daemon=True)

    def start(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._thread.start()

    def note(self, line: str) -> None:
        """A line of reqdrive's own in the log and the tail (redacted like the rest)."""
        with self._lock:
            self._emit(f"{line}\n".encode())
            self._log.flush()

    def finish(self, grace_s: float) -> None:
        """Drain to end of file; if something unmarked still holds the pipe, stop anyway."""
        self._thread.join(grace_s)
        self._stop.set()
        self._thread.join()
        if self._stream is not None:
            self._stream.close()

    def tail(self) -> str:
        with self._lock:
            while self._unread:
                self._tail.add(self._lines.redact_line(_text(self._unread.popleft())))
            self._unread_bytes = 0
        return self._tail.text()

    def _run(self) -> None:
        pending = b""
        assert self._stream is not None  # noqa: S101 - started with one
        with selectors.DefaultSelector() as selector:
            selector.register(self._stream, selectors.EVENT_READ)
            while not self._stop.is_set():
                if not selector.select(POLL_S):
                    continue
                chunk = os.read(self._stream.fileno(), READ_CHUNK)
                if not chunk:
                    break
                pending = self._write_lines(pending + chunk)
        with self._lock:
            if pending:
                self._emit(pending)
            self._log.flush()

    def _write_lines(self, data: bytes) -> bytes:
        """Write every complete line; return the unfinished rest (a secret may continue)."""
        *complete, rest = data.split(b"\n")
        with self._lock:
            for line in complete:
                self._emit(line + b"\n")
            if len(rest) > MAX_LINE_BYTES:
                self._emit(rest)
                rest = b""
            self._log.flush()
        return rest

    def _emit(self, raw: bytes) -> None:
        if self._log_room <= 0:
            self._unread.append(raw)
            self._unread_bytes += len(raw)
            while self._unread_bytes - len(self._unread[0]) >= TAIL_CHARS:
                dropped = self._unread.popleft()
                self._unread_bytes -= len(dropped)
                self._lines.skip_line(_text(dropped))  # a key block it opens stays hidden
            return
        text = self._lines.redact_line(_text(raw))
        self._log_room -= len(raw)
        self._log.write(text)
        if self._log_room <= 0:
            self._log.write(
                "\n[reqdrive] the log ends here: output past its size limit is dropped\n"
            )
        self._tail.add(text)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")
