"""Deliver a run's reporter events in order on a thread of their own, so a slow or failing
reporter (GitHub's latency, a 502) never stalls or ends the run."""

from __future__ import annotations

import copy
import logging
import queue
import threading
from collections.abc import Sequence
from typing import Any

from worker.model.gates import GateResult, GateSpec
from worker.model.state import AttemptRecord, RunResult, RunStep, StoryRecord
from worker.report.protocol import Reporter

log = logging.getLogger(__name__)

# A failing event is tried again after 0.5 s, 1 s, 2 s, ... at most 30 s apart, and given up
# after this many tries: the next events (the run's ending above all) still have to go out.
MAX_TRIES = 6
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 30.0
CLOSE_TIMEOUT_S = 120.0
_STOP = object()


class BackgroundReporter:
    """A Reporter that queues each event and hands it to `inner` on a background thread.

    Events keep their order (a retried event holds back the ones after it) and carry a copy of
    their arguments, so the run changing a story afterwards never changes what was reported.
    """

    def __init__(
        self,
        inner: Reporter,
        *,
        max_tries: int = MAX_TRIES,
        first_delay_s: float = FIRST_DELAY_S,
        max_delay_s: float = MAX_DELAY_S,
    ) -> None:
        self.inner = inner
        self.max_tries = max_tries
        self.first_delay_s = first_delay_s
        self.max_delay_s = max_delay_s
        self._events: queue.Queue[Any] = queue.Queue()
        self._abandon = threading.Event()  # close() timed out: stop waiting between tries
        self._thread = threading.Thread(target=self._deliver, name="reqdrive-reporter", daemon=True)
        self._thread.start()

    # the Reporter protocol, queued ------------------------------------------------------------

    def run_started(self, run_id: str, source: str, branch: str) -> None:
        self._put("run_started", run_id, source, branch)

    def step_started(self, step: RunStep) -> None:
        self._put("step_started", step)

    def plan_ready(self, stories: Sequence[StoryRecord]) -> None:
        self._put("plan_ready", list(stories))

    def story_started(self, story: StoryRecord, attempt: int, iteration: int) -> None:
        self._put("story_started", story, attempt, iteration)

    def story_finished(self, story: StoryRecord, attempt: AttemptRecord) -> None:
        self._put("story_finished", story, attempt)

    def branch_pushed(self, branch: str, sha: str) -> None:
        self._put("branch_pushed", branch, sha)

    def agent_started(self, label: str) -> None:
        self._put("agent_started", label)

    def agent_finished(self, label: str, seconds: float, ended: str) -> None:
        self._put("agent_finished", label, seconds, ended)

    def gates_started(self, label: str, gates: Sequence[GateSpec]) -> None:
        self._put("gates_started", label, list(gates))

    def gates_finished(self, label: str, results: Sequence[GateResult], seconds: float) -> None:
        self._put("gates_finished", label, list(results), seconds)

    def run_finished(self, result: RunResult) -> None:
        self._put("run_finished", result)

    def run_failed(self, step: RunStep, message: str, *, error_type: str = "") -> None:
        self._put("run_failed", step, message, error_type=error_type)

    # delivery ---------------------------------------------------------------------------------

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
        """Deliver what is queued, then stop; False when the timeout left events undelivered."""
        self._events.put(_STOP)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._abandon.set()
            log.error("reporter events left undelivered", extra={"pending": self._events.qsize()})
            return False
        return True

    def _put(self, name: str, *args: Any, **kwargs: Any) -> None:
        self._events.put((name, copy.deepcopy(args), copy.deepcopy(kwargs)))

    def _deliver(self) -> None:
        while True:
            event = self._events.get()
            if event is _STOP:
                return
            self._try(*event)

    def _try(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        delay = self.first_delay_s
        for tried in range(1, self.max_tries + 1):
            try:
                getattr(self.inner, name)(*args, **kwargs)
                return
            except Exception:
                log.warning(
                    "reporter event failed", exc_info=True, extra={"event": name, "tried": tried}
                )
            if tried == self.max_tries or self._abandon.wait(delay):
                break
            delay = min(delay * 2, self.max_delay_s)
        log.error("reporter event given up", extra={"event": name, "tries": self.max_tries})
