"""An output flood costs the worker work in proportion to it, never more, and hides secrets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from worker.confine.processes import run_process
from worker.confine.redact import REDACTED, Redactor, redact_file

TOKEN = "ghs_" + "Q7w9E2r4T6y8U1i3O5p7A9s2D4f6G8h0J2k4"
KEY_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"


class CountingRedactor(Redactor):
    """A real Redactor that counts the characters it is given to redact or to look through
    for the next thing to hide."""

    scanned = 0

    def redact(self, text: str) -> str:
        self.scanned += len(text)
        return super().redact(text)

    def next_hidden(self, text: str, start: int = 0) -> int:
        found = super().next_hidden(text, start)
        self.scanned += (len(text) if found == -1 else found) - start
        return found


def flood(tmp_path: Path, megabytes: int, redactor: Redactor) -> str:
    """Run a child printing `megabytes` MiB of 1 KiB lines, a key opened near the end, then
    the token; the log is limited to 1 MiB. Returns the redacted tail."""
    code = (
        "import sys\n"
        "line = b'x' * 1023 + b'\\n'\n"
        f"for _ in range({megabytes} * 1024):\n"
        "    sys.stdout.buffer.write(line)\n"
        "sys.stdout.buffer.write(b'-----BEGIN RSA PRIVATE KEY-----\\n')\n"
        f"sys.stdout.buffer.write(b'x' * 100000 + b'\\n{KEY_BODY}\\n')\n"
        "sys.stdout.buffer.write(b'-----END RSA PRIVATE KEY-----\\n')\n"
        f"print('done {TOKEN}')\n"
    )
    outcome = run_process(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        timeout_s=600,
        log_path=tmp_path / f"flood-{megabytes}.log",
        redactor=redactor,
        max_log_bytes=1024 * 1024,
    )
    assert outcome.exit_code == 0
    return outcome.output_tail


def test_a_flood_past_the_log_limit_is_not_redacted_byte_by_byte(tmp_path: Path) -> None:
    small, large = CountingRedactor([TOKEN]), CountingRedactor([TOKEN])
    tail = flood(tmp_path, 4, small)
    flood(tmp_path, 64, large)
    # What is redacted is the log (1 MiB) and the tail (64 KiB), whatever the flood's size:
    # before, each of the 64 MiB went through the redactor.
    assert small.scanned < 2 * 1024 * 1024
    assert large.scanned == small.scanned
    assert f"done {REDACTED}" in tail and TOKEN not in tail
    assert KEY_BODY not in tail  # the key opened in the part that was only scanned


def test_a_flood_of_key_headers_is_redacted_in_one_pass(tmp_path: Path) -> None:
    """Each BEGIN with no END once made the redactor scan to the end of the text again: eight
    megabytes of them took hours. In a child whose CPU time is capped at a minute (a guard
    against a hang, not a measure), they are hidden up to the one block that closes."""
    code = (
        "import resource, sys\n"
        "from worker.confine.redact import Redactor\n"
        "resource.setrlimit(resource.RLIMIT_CPU, (60, 60))\n"
        "text = '-----BEGIN RSA PRIVATE KEY-----' * 270_000 + ' -----END RSA PRIVATE KEY----- ok'\n"
        "print(Redactor().redact(text))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == f"{REDACTED} ok\n"
    unclosed = subprocess.run(
        [sys.executable, "-c", code.replace(" -----END RSA PRIVATE KEY----- ok", "")],
        capture_output=True,
        text=True,
    )
    assert unclosed.returncode == 0, unclosed.stderr[-2000:]


def test_redacting_a_file_of_many_short_lines_returns_its_redacted_end(tmp_path: Path) -> None:
    report = tmp_path / "output.txt"
    report.write_text("ok\n" * 2_000_000 + f"last {TOKEN}\n")
    size = report.stat().st_size
    counting = CountingRedactor([TOKEN])
    tail = redact_file(report, counting)
    assert tail is not None and tail.endswith(f"last {REDACTED}\n") and len(tail) == 64 * 1024
    # Read twice, to find that it holds a token and to hide it; each time every character
    # once, and the token's line again up to the token.
    assert counting.scanned == 2 * (size + len("last "))
