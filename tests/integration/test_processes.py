"""A child process runs in its own group, its output reaches disk redacted, and it is stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.processes import running
from worker.confine.processes import MARK_VAR, TAIL_CHARS, ProcessOutcome, marked_pids, run_process
from worker.confine.redact import REDACTED, Redactor

TOKEN = "ghs_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"
BASE_ENV = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}


def wait_for_file(path: Path, stop: threading.Event) -> str:
    while not (path.exists() and path.read_text().strip()):
        if stop.wait(0.02):
            return ""
    return path.read_text().strip()


def bash(
    script: str,
    tmp_path: Path,
    *,
    timeout_s: float = 60,
    grace_s: float = 1.0,
    stdin_path: Path | None = None,
    cancel: threading.Event | None = None,
) -> tuple[ProcessOutcome, str]:
    log = tmp_path / "out.log"
    outcome = run_process(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=BASE_ENV,
        timeout_s=timeout_s,
        log_path=log,
        redactor=Redactor(),
        stdin_path=stdin_path,
        grace_s=grace_s,
        cancel=cancel,
    )
    return outcome, log.read_text(encoding="utf-8")


def test_exit_code_and_output_are_reported(tmp_path: Path) -> None:
    outcome, log = bash("echo hello; echo oops >&2; exit 3", tmp_path)
    assert outcome.exit_code == 3
    assert not outcome.timed_out
    assert log == "hello\noops\n"
    assert outcome.output_tail == log


def test_stdin_comes_from_the_given_file(tmp_path: Path) -> None:
    prompt = tmp_path / "prompt.md"
    prompt.write_text("implement US-001\n")
    outcome, log = bash("cat", tmp_path, stdin_path=prompt)
    assert outcome.exit_code == 0
    assert log == "implement US-001\n"


def test_environment_is_exactly_the_given_one_plus_the_marker(tmp_path: Path) -> None:
    log = tmp_path / "env.log"
    env = {"PATH": os.environ["PATH"], "ONLY_THIS": "value"}
    outcome = run_process(
        ["env"], cwd=tmp_path, env=env, timeout_s=60, log_path=log, redactor=Redactor()
    )
    assert outcome.exit_code == 0
    seen = dict(line.split("=", 1) for line in log.read_text().splitlines())
    mark = seen.pop(MARK_VAR)
    assert seen == env
    assert len(mark) == 32


def test_a_token_split_across_writes_never_reaches_disk(tmp_path: Path) -> None:
    # The child writes the token in two flushed halves with a pause between them, so the
    # reader sees it across two reads; the log must still hold it only redacted.
    code = (
        "import sys, time\n"
        f"sys.stdout.write('url https://x-access-token:{TOKEN[:10]}'); sys.stdout.flush()\n"
        "time.sleep(0.3)\n"
        f"sys.stdout.write('{TOKEN[10:]}@github.com/o/r\\n'); sys.stdout.flush()\n"
        "sys.stdout.buffer.write(b'bad bytes \\xff\\xfe end\\n')\n"
        "sys.stdout.write('secret value and-no-newline configured-secret-9')\n"
    )
    log = tmp_path / "redacted.log"
    redactor = Redactor(["configured-secret-9"])
    outcome = run_process(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=BASE_ENV,
        timeout_s=60,
        log_path=log,
        redactor=redactor,
    )
    raw = log.read_bytes()
    assert outcome.exit_code == 0
    assert TOKEN.encode() not in raw
    assert TOKEN[10:].encode() not in raw
    assert b"configured-secret-9" not in raw
    text = raw.decode("utf-8")
    assert f"https://x-access-token:{REDACTED}@github.com/o/r\n" in text
    assert "bad bytes \ufffd\ufffd end\n" in text
    assert text.endswith(f"and-no-newline {REDACTED}")
    assert TOKEN not in outcome.output_tail


def test_a_private_key_printed_line_by_line_is_hidden_whole(tmp_path: Path) -> None:
    body = "MIIEowIBAAKCAQEA1c7+9z5Pad7OejecsQ0bu3aozN3tihPmljnnudb9G3HECdnH"
    script = (
        "echo before; echo '-----BEGIN OPENSSH PRIVATE KEY-----'; sleep 0.2; "
        f"echo '{body}'; echo '-----END OPENSSH PRIVATE KEY-----'; echo after"
    )
    _, log = bash(script, tmp_path)
    assert log == f"before\n{REDACTED}\nafter\n"


def test_a_huge_line_without_newline_is_kept(tmp_path: Path) -> None:
    code = "import sys; sys.stdout.write('x' * (3 * 1024 * 1024))"
    log = tmp_path / "huge.log"
    outcome = run_process(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=BASE_ENV,
        timeout_s=60,
        log_path=log,
        redactor=Redactor(),
    )
    assert outcome.exit_code == 0
    assert log.stat().st_size == 3 * 1024 * 1024
    assert outcome.output_tail == "x" * TAIL_CHARS


def test_log_is_appended_not_replaced(tmp_path: Path) -> None:
    bash("echo first", tmp_path)
    _, log = bash("echo second", tmp_path)
    assert log == "first\nsecond\n"


def test_timeout_kills_the_child_and_a_grandchild_that_escaped_with_setsid(
    tmp_path: Path,
) -> None:
    # The grandchild starts its own session, so killing the child's group cannot reach it;
    # only the environment marker finds it.
    script = (
        "echo $$ > child.pid; "
        "setsid bash -c 'echo $$ > grandchild.pid; exec sleep 300' & "
        "while [ ! -s grandchild.pid ]; do sleep 0.05; done; echo started; sleep 300"
    )
    outcome, log = bash(script, tmp_path, timeout_s=5)
    child = int((tmp_path / "child.pid").read_text())
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    assert outcome.timed_out
    assert outcome.exit_code is None
    assert "started" in log
    assert not running(child)
    assert not running(grandchild)


def test_a_child_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    # The trap reports SIGTERM and keeps looping; only SIGKILL after the grace period ends it.
    script = (
        "echo $$ > child.pid; trap 'echo got-term' TERM; echo ready; while :; do sleep 0.1; done"
    )
    outcome, log = bash(script, tmp_path, timeout_s=3, grace_s=0.5)
    child = int((tmp_path / "child.pid").read_text())
    assert outcome.timed_out
    assert "got-term" in log
    assert not running(child)


def test_cancel_stops_the_whole_group(tmp_path: Path) -> None:
    cancel = threading.Event()
    done = threading.Event()
    pid_file = tmp_path / "child.pid"

    def cancel_when_started() -> None:
        if wait_for_file(pid_file, done):
            cancel.set()

    watcher = threading.Thread(target=cancel_when_started)
    watcher.start()
    try:
        outcome, _ = bash("echo $$ > child.pid; sleep 300 & wait", tmp_path, cancel=cancel)
    finally:
        done.set()
        watcher.join()
    assert outcome.cancelled
    assert not outcome.timed_out
    assert outcome.exit_code is None
    assert not running(int(pid_file.read_text()))


def test_background_process_left_after_a_normal_exit_is_stopped(tmp_path: Path) -> None:
    script = (
        "setsid bash -c 'echo $$ > bg.pid; exec sleep 300' < /dev/null > /dev/null 2>&1 & "
        "while [ ! -s bg.pid ]; do sleep 0.05; done; exit 0"
    )
    outcome, _ = bash(script, tmp_path)
    assert outcome.exit_code == 0
    assert not running(int((tmp_path / "bg.pid").read_text()))


def test_marked_pids_finds_processes_by_their_marker(tmp_path: Path) -> None:
    mark = "0123456789abcdef0123456789abcdef"
    proc = subprocess.Popen(["sleep", "300"], env={**BASE_ENV, MARK_VAR: mark})
    try:
        assert marked_pids(mark) == [proc.pid]
        assert marked_pids("f" * 32) == []
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert marked_pids(mark) == []


def test_a_missing_executable_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        run_process(
            [str(tmp_path / "no-such-agent")],
            cwd=tmp_path,
            env=BASE_ENV,
            timeout_s=5,
            log_path=tmp_path / "x.log",
            redactor=Redactor(),
        )


def test_a_log_stops_growing_at_its_size_limit_and_the_tail_is_kept(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    # The padding made once: a `$(printf ...)` per line forked 20,000 subshells (15 s).
    script = (
        "printf -v pad '%0100d' 0; for i in $(seq 1 20000); do echo line-$i-$pad; done; "
        "echo last-line"
    )
    outcome = run_process(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=BASE_ENV,
        timeout_s=60,
        log_path=log,
        redactor=Redactor(),
        max_log_bytes=100_000,
    )
    assert outcome.exit_code == 0
    text = log.read_text()
    assert 100_000 <= len(text) < 110_000
    assert text.endswith("output past its size limit is dropped\n")
    assert "last-line" in outcome.output_tail and "last-line" not in text
