"""Between the turns of a call a runner streams (Claude Code's stream-json): its replies' tokens
priced as they arrive, and the call stopped once the run's spend with them reaches budgetUsd."""

from __future__ import annotations

import threading
from pathlib import Path

from worker.agents.claude import StreamedUsage
from worker.agents.pricing import price_for

POLL_S = 0.25


class TurnBudget(threading.Thread):
    """Watches one agent call: `stop` (the call's cancel) is set when the run is cancelled, or
    when what the run spent before the call plus its streamed replies reaches the budget and
    another turn is coming (a call whose last reply reached it ends by itself, its work kept)."""

    def __init__(
        self,
        *,
        log_path: Path,
        model: str | None,
        spent_usd: float,
        budget_usd: float,
        cancel: threading.Event,
    ) -> None:
        super().__init__(name="reqdrive-turn-budget", daemon=True)
        start = log_path.stat().st_size if log_path.exists() else 0
        self.usage = StreamedUsage(log_path, start)
        self.price = price_for(model)
        self.spent_usd, self.budget_usd = spent_usd, budget_usd
        self.cancel = cancel
        self.stop = threading.Event()  # given to the runner as the call's cancel
        self.done = threading.Event()
        self.estimate_usd = 0.0
        self.reached = False

    def run(self) -> None:
        while not self.done.wait(POLL_S):
            if self.cancel.is_set():
                self.stop.set()
            if self.reached or self.stop.is_set():
                continue
            self.estimate_usd = self.price.of(*self.usage.read())
            if self.spent_usd + self.estimate_usd >= self.budget_usd and self.usage.turn_pending:
                self.reached = True
                self.stop.set()

    def finish(self) -> None:
        self.done.set()
        self.join()
