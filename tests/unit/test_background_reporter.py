"""The background reporter: events in order, copies of their arguments, failures retried."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from worker.model.state import RunStep, StoryRecord, StoryState
from worker.report.background import BackgroundReporter
from worker.report.protocol import NullReporter


class Flaky(NullReporter):
    """Fails the first `failures` deliveries of every event, then records it."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.tries: dict[str, int] = {}
        self.events: list[tuple[Any, ...]] = []

    def _note(self, *event: Any) -> None:
        key = repr(event)
        self.tries[key] = self.tries.get(key, 0) + 1
        if self.tries[key] <= self.failures:
            raise ConnectionError("GitHub answered 502")
        self.events.append(event)

    def step_started(self, step: RunStep) -> None:
        self._note("step", step)

    def story_started(self, story: StoryRecord, attempt: int, iteration: int) -> None:
        self._note("story", story.id, story.state, attempt)

    def branch_pushed(self, branch: str, sha: str) -> None:
        self._note("pushed", branch, sha)

    def run_failed(self, step: RunStep, message: str, *, error_type: str = "") -> None:
        self._note("failed", step, message, error_type)


def story(state: StoryState = StoryState.PENDING) -> StoryRecord:
    return StoryRecord(id="US-001", title="One", priority=1, acceptance_criteria=["a"], state=state)


def test_events_arrive_in_order_after_their_failures_are_retried() -> None:
    inner = Flaky(failures=2)
    reporter = BackgroundReporter(inner, first_delay_s=0.001)
    reporter.step_started(RunStep.PLAN)
    reporter.story_started(story(), 1, 1)
    reporter.branch_pushed("reqdrive/x", "abc123")
    reporter.run_failed(RunStep.VERIFY, "gates broke", error_type="GateError")
    assert reporter.close()
    assert inner.events == [
        ("step", RunStep.PLAN),
        ("story", "US-001", StoryState.PENDING, 1),
        ("pushed", "reqdrive/x", "abc123"),
        ("failed", RunStep.VERIFY, "gates broke", "GateError"),
    ]
    assert set(inner.tries.values()) == {3}


def test_an_event_that_always_fails_is_given_up_and_the_next_ones_still_go_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(Flaky):
        def step_started(self, step: RunStep) -> None:
            raise RuntimeError("reporter bug")

    inner = Broken()
    reporter = BackgroundReporter(inner, max_tries=3, first_delay_s=0.001)
    reporter.step_started(RunStep.PLAN)
    reporter.branch_pushed("reqdrive/x", "abc123")
    assert reporter.close()
    assert inner.events == [("pushed", "reqdrive/x", "abc123")]
    failed = [r for r in caplog.records if r.getMessage() == "reporter event failed"]
    assert len(failed) == 3
    assert any(r.getMessage() == "reporter event given up" for r in caplog.records)


def test_a_story_changed_after_the_event_is_reported_as_it_was() -> None:
    inner = Flaky()
    reporter = BackgroundReporter(inner)
    record = story()
    reporter.story_started(record, 1, 1)
    record.state = StoryState.PASSED  # the run goes on while the event waits its turn
    assert reporter.close()
    assert inner.events == [("story", "US-001", StoryState.PENDING, 1)]


def test_a_reporter_that_blocks_does_not_block_the_run() -> None:
    release = threading.Event()

    class Slow(Flaky):
        def step_started(self, step: RunStep) -> None:
            release.wait()
            super().step_started(step)

    inner = Slow()
    reporter = BackgroundReporter(inner)
    # Delivered inline, the first event would wait forever for `release` set below.
    for step in (RunStep.PLAN, RunStep.IMPLEMENT, RunStep.VERIFY):
        reporter.step_started(step)
    release.set()
    assert reporter.close()
    assert inner.events == [("step", s) for s in (RunStep.PLAN, RunStep.IMPLEMENT, RunStep.VERIFY)]


def test_close_gives_up_on_a_reporter_that_never_returns() -> None:
    never = threading.Event()

    class Stuck(Flaky):
        def step_started(self, step: RunStep) -> None:
            never.wait()

    reporter = BackgroundReporter(Stuck())
    reporter.step_started(RunStep.PLAN)
    assert reporter.close(timeout_s=0.05) is False
    never.set()
