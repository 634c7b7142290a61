"""Read an unauthenticated request body with a deadline and within a per-process byte budget."""

from __future__ import annotations

import logging
import threading
import time
from enum import Enum
from typing import IO

MAX_BODY_BYTES = 25 * 1024 * 1024  # GitHub caps payloads at 25 MB and drops larger ones
READ_CHUNK_BYTES = 64 * 1024  # granian's read(n) waits for all n: the deadline's granularity
# Handler threads waiting for bodies at once. granian runs the WSGI app on a fixed set of
# blocking threads (bot/ops/cli.py sets them); bodies may hold at most this many, so the rest
# always answer /healthz and deliveries whose body is already here.
MAX_WAITING_READS = 96

log = logging.getLogger(__name__)


class Refusal(Enum):
    """Why a body was not read."""

    TOO_LARGE = "too_large"  # over 25 MiB (only known while reading an unframed body)
    BUSY = "busy"  # the byte budget or the reader slots are taken: redeliver later
    TOO_SLOW = "too_slow"  # the body was still arriving at the deadline


class BodyBudget:
    """Bytes of bodies not yet verified that this process holds at once, and reader slots.

    A body's bytes are reserved before they are read, so forty 25 MiB uploads held open
    cost at most the budget, not a gigabyte: the rest are refused 503 without being read.
    """

    def __init__(self, limit_bytes: int, deadline_s: float) -> None:
        self.limit_bytes = limit_bytes
        self.deadline_s = deadline_s
        self._held = 0
        self._lock = threading.Lock()
        self._waiting = threading.BoundedSemaphore(MAX_WAITING_READS)

    @property
    def held_bytes(self) -> int:
        return self._held

    def reserve(self, n: int) -> bool:
        with self._lock:
            if self._held + n > self.limit_bytes:
                return False
            self._held += n
            return True

    def release(self, n: int) -> None:
        with self._lock:
            self._held -= n

    def read(self, stream: IO[bytes], length: int | None) -> Body | Refusal:
        """The body (its bytes reserved until Body.release), or why it was not read.

        length None means an unframed body the server ends (wsgi.input_terminated): its bytes
        are reserved as they come. The deadline is checked between 64 KiB chunks: a body
        trickled in is refused at the first chunk past it. A WSGI read itself cannot time
        out (and granian stalls the whole worker when a body is read from another thread
        after its request was answered, so no reader thread is left behind): a client that
        sends nothing holds its thread until it hangs up. At most MAX_WAITING_READS do; the
        other server threads keep answering /healthz and refuse further bodies with 503.
        """
        if length is not None and not self.reserve(length):
            return Refusal.BUSY
        if not self._waiting.acquire(blocking=False):
            if length is not None:
                self.release(length)
            return Refusal.BUSY
        try:
            return self._read(stream, length)
        finally:
            self._waiting.release()

    def _read(self, stream: IO[bytes], length: int | None) -> Body | Refusal:
        deadline = time.monotonic() + self.deadline_s
        reserved = length or 0
        chunks: list[bytes] = []
        size = 0
        want = length if length is not None else MAX_BODY_BYTES + 1
        refusal: Refusal | None = None
        try:
            while size < want:
                if time.monotonic() > deadline:
                    refusal = Refusal.TOO_SLOW
                    break
                chunk = stream.read(min(READ_CHUNK_BYTES, want - size))
                if not chunk:
                    break  # a short body fails the signature check
                if length is None:
                    if size + len(chunk) > MAX_BODY_BYTES:
                        refusal = Refusal.TOO_LARGE
                        break
                    if not self.reserve(len(chunk)):
                        refusal = Refusal.BUSY
                        break
                    reserved += len(chunk)
                size += len(chunk)
                chunks.append(chunk)
        except Exception as exc:  # a client hanging up mid-body; the server's own error type
            log.info("body read ended early", extra={"error": type(exc).__name__})
        if refusal is not None:
            self.release(reserved)
            return refusal
        data = b"".join(chunks)
        chunks.clear()
        return Body(data, self, reserved)


class Body:
    """Bytes read within the budget; release() gives their reservation back."""

    def __init__(self, data: bytes, budget: BodyBudget, reserved: int) -> None:
        self.data = data
        self._budget = budget
        self._reserved = reserved

    def release(self) -> None:
        self._budget.release(self._reserved)
        self._reserved = 0
