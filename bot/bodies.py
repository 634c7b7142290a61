"""Read an unauthenticated request body with a deadline and within a per-process byte budget."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from enum import Enum
from typing import IO

MAX_BODY_BYTES = 25 * 1024 * 1024  # GitHub caps payloads at 25 MB and drops larger ones
READ_CHUNK_BYTES = 256 * 1024
# Handler threads waiting for bodies at once. granian runs the WSGI app on a fixed set of
# blocking threads (bot/cli.py sets them); bodies may hold at most this many, so the rest
# always answer /healthz and deliveries whose body is already here.
MAX_WAITING_READS = 96
# Reader threads still blocked on a client that was already answered 408 (it sent nothing
# since): each costs a thread until the client sends or hangs up, so they are capped too.
MAX_READERS = 1024

log = logging.getLogger(__name__)


class Refusal(Enum):
    """Why a body was not read."""

    TOO_LARGE = "too_large"  # over 25 MiB (only known while reading an unframed body)
    BUSY = "busy"  # the byte budget or the reader slots are taken: redeliver later
    TOO_SLOW = "too_slow"  # the body did not arrive before the deadline


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
        self._readers = threading.BoundedSemaphore(MAX_READERS)
        self._pool = ThreadPoolExecutor(MAX_READERS, thread_name_prefix="body-reader")

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
        are reserved as they come. WSGI reads cannot time out, so a pooled thread reads and
        this one waits until the deadline; a reader left behind stops when the client sends
        or hangs up, and gives its bytes back then.
        """
        if length is not None and not self.reserve(length):
            return Refusal.BUSY
        if not self._waiting.acquire(blocking=False):
            self._give_back(length)
            return Refusal.BUSY
        try:
            if not self._readers.acquire(blocking=False):
                self._give_back(length)
                return Refusal.BUSY
            reader = _Reader(self, stream, length)
            self._pool.submit(reader.run)
            return reader.result(self.deadline_s)
        finally:
            self._waiting.release()

    def _give_back(self, length: int | None) -> None:
        if length is not None:
            self.release(length)

    def _reader_done(self) -> None:
        self._readers.release()


class Body:
    """Bytes read within the budget; release() gives their reservation back."""

    def __init__(self, data: bytes, budget: BodyBudget, reserved: int) -> None:
        self.data = data
        self._budget = budget
        self._reserved = reserved

    def release(self) -> None:
        self._budget.release(self._reserved)
        self._reserved = 0


class _Reader:
    """One body read on a pooled thread; whoever finishes last gives the bytes back."""

    def __init__(self, budget: BodyBudget, stream: IO[bytes], length: int | None) -> None:
        self._budget = budget
        self._stream = stream
        self._length = length
        self._reserved = length or 0
        self._chunks: list[bytes] = []
        self._outcome: Refusal | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._abandoned = False

    def run(self) -> None:
        try:
            self._read()
        except Exception as exc:  # a client hanging up mid-body; the server's own error type
            log.info("body read ended early", extra={"error": type(exc).__name__})
        finally:
            with self._lock:
                self._done.set()
                abandoned = self._abandoned
            if abandoned:
                self._chunks.clear()
                self._budget.release(self._reserved)
            self._budget._reader_done()

    def _read(self) -> None:
        size = 0
        want = self._length if self._length is not None else MAX_BODY_BYTES + 1
        while size < want and not self._abandoned:
            chunk = self._stream.read(min(READ_CHUNK_BYTES, want - size))
            if not chunk:
                return  # a short body fails the signature check
            if self._length is None:
                if size + len(chunk) > MAX_BODY_BYTES:
                    self._outcome = Refusal.TOO_LARGE
                    return
                if not self._budget.reserve(len(chunk)):
                    self._outcome = Refusal.BUSY
                    return
                self._reserved += len(chunk)
            size += len(chunk)
            self._chunks.append(chunk)

    def result(self, deadline_s: float) -> Body | Refusal:
        self._done.wait(deadline_s)
        with self._lock:
            if not self._done.is_set():
                self._abandoned = True  # the reader gives the bytes back when it ends
                return Refusal.TOO_SLOW
        if self._outcome is not None:
            self._budget.release(self._reserved)
            return self._outcome
        data = b"".join(self._chunks)
        self._chunks.clear()
        return Body(data, self._budget, self._reserved)
