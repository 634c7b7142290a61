"""On a terminal, the line of what runs now, its seconds counting up in place."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TextIO

TICK_S = 1.0
CLEAR_LINE = "\r\x1b[K"


class LiveLine:
    """Writes lines to a terminal; the one `hold` gave stays last, rewritten every tick with
    the seconds since, until the next line replaces it (its ending says how long it took).

    Lines come from the reporter's thread and the ticks from a daemon thread of its own, so
    every write holds one lock.
    """

    def __init__(
        self,
        stream: TextIO,
        *,
        tick_s: float = TICK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._tick_s = tick_s
        self._clock = clock
        self._lock = threading.Lock()
        self._held: tuple[str, float] | None = None  # the line, and since when
        self._wake = threading.Event()
        threading.Thread(target=self._tick, name="reqdrive-live-line", daemon=True).start()

    def say(self, text: str) -> None:
        """A line that stays; it replaces a held one."""
        with self._lock:
            self._write(f"{CLEAR_LINE if self._held else ''}{text}\n")
            self._held = None

    def hold(self, text: str) -> None:
        """A line of what runs now: it counts its seconds until the next line comes."""
        with self._lock:
            self._write(f"{CLEAR_LINE if self._held else ''}{text}")
            self._held = (text, self._clock())
        self._wake.set()

    def _tick(self) -> None:
        while True:
            self._wake.wait()
            time.sleep(self._tick_s)
            with self._lock:
                if self._held is None:
                    self._wake.clear()
                    continue
                text, since = self._held
                self._write(f"{CLEAR_LINE}{text} {int(self._clock() - since)}s")

    def _write(self, text: str) -> None:
        self._stream.write(text)
        self._stream.flush()
