"""The bytes of unverified bodies one web process may hold at once, and GitHub's size cap."""

from __future__ import annotations

import threading

MAX_BODY_BYTES = 25 * 1024 * 1024  # GitHub caps payloads at 25 MB and drops larger ones


class BodyBudget:
    """Bytes of bodies not yet verified that this process holds at once, and their deadline.

    A body's bytes are reserved before they are read, so forty 25 MiB uploads held open
    cost at most the budget, not a gigabyte: the rest are refused 503 without being read.
    """

    def __init__(self, limit_bytes: int, deadline_s: float) -> None:
        self.limit_bytes = limit_bytes
        self.deadline_s = deadline_s
        self._held = 0
        self._lock = threading.Lock()

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
