"""Between the turns of a call a runner streams (Claude Code's stream-json): its replies' tokens
priced as they arrive, the call stopped at a budget (budgetUsd, the installation's month)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from worker.agents.claude import StreamedUsage
from worker.agents.pricing import price_for

log = logging.getLogger(__name__)

POLL_S = 0.25
# The headroom is asked again every this many polls: the installation's month is shared with
# other runs, whose calls end and are charged while this one streams.
HEADROOM_EVERY_POLLS = 8


class TurnBudget(threading.Thread):
    """Watches one agent call: `stop` (the call's cancel) is set when the run is cancelled, or
    when its streamed replies reach the headroom left (the least of what the run's budgetUsd
    and the installation's monthly budget leave) and another turn is coming (a call whose last
    reply reached it ends by itself, its work kept)."""

    def __init__(
        self,
        *,
        log_path: Path,
        model: str | None,
        headroom: Callable[[], float],
        cancel: threading.Event,
    ) -> None:
        super().__init__(name="reqdrive-turn-budget", daemon=True)
        start = log_path.stat().st_size if log_path.exists() else 0
        self.usage = StreamedUsage(log_path, start)
        self.price = price_for(model)
        self.headroom = headroom
        self.left_usd = headroom()
        self.cancel = cancel
        self.stop = threading.Event()  # given to the runner as the call's cancel
        self.done = threading.Event()
        self.estimate_usd = 0.0
        self.reached = False

    def run(self) -> None:
        polls = 0
        while not self.done.wait(POLL_S):
            polls += 1
            if self.cancel.is_set():
                self.stop.set()
            if self.reached or self.stop.is_set():
                continue
            if polls % HEADROOM_EVERY_POLLS == 0:
                self._refresh()
            self.estimate_usd = self.price.of(*self.usage.read())
            if self.estimate_usd >= self.left_usd and self.usage.turn_pending:
                self.reached = True
                self.stop.set()

    def _refresh(self) -> None:
        try:
            self.left_usd = self.headroom()
        except Exception:  # the shared count away for a moment (Redis): keep the last figure
            log.warning("budget headroom not read")

    def finish(self) -> None:
        self.done.set()
        self.join()
