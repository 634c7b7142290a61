"""A run tells its reporter every step, push and ending, in order, however the reporter fails."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

from tests.integration.test_pipeline import MakeProject, implement, prd
from tests.integration.test_pipeline import make_project as make_project
from worker.exceptions import PrdError
from worker.model.state import AttemptRecord, RunResult, RunStep, StoryRecord
from worker.report.protocol import NullReporter
from worker.run.checkpoint_file import FileCheckpointStore
from worker.run.pipeline import Pipeline


class Unreliable(NullReporter):  # GitHub's events only, as GitHubReporter takes them
    """Sleeps on every event and fails each one the first time: a slow, flaky GitHub."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.seen: set[str] = set()

    def _note(self, *event: Any) -> None:
        time.sleep(0.05)
        if repr(event) not in self.seen:
            self.seen.add(repr(event))
            raise ConnectionError("GitHub answered 502")
        self.events.append(event)

    def run_started(self, run_id: str, source: str, branch: str) -> None:
        self._note("run_started", run_id, branch)

    def step_started(self, step: RunStep) -> None:
        self._note("step", str(step))

    def plan_ready(self, stories: Sequence[StoryRecord]) -> None:
        self._note("plan", tuple(s.id for s in stories))

    def story_started(self, story: StoryRecord, attempt: int, iteration: int) -> None:
        self._note("story_started", story.id, attempt)

    def story_finished(self, story: StoryRecord, attempt: AttemptRecord) -> None:
        self._note("story_finished", story.id, str(story.state), attempt.commit)

    def branch_pushed(self, branch: str, sha: str) -> None:
        self._note("pushed", branch, sha)

    def run_finished(self, result: RunResult) -> None:
        self._note("finished", result.ready, result.head_sha)

    def run_failed(self, step: RunStep, message: str, *, error_type: str = "") -> None:
        self._note("failed", str(step), error_type, message)


def run(project: Any, scenario: Any, reporter: Unreliable) -> RunResult:
    store = FileCheckpointStore(project.work_dir / "runs")
    return Pipeline(project.spec(scenario), reporter=reporter, checkpoints=store).run()


def test_a_slow_failing_reporter_still_hears_every_event_in_order(
    make_project: MakeProject,
) -> None:
    project = make_project()
    scenario = project.scenario(
        {"plan": [{"prd": prd(2)}], "stories": {"US-001": [implement(1)], "US-002": [implement(2)]}}
    )
    reporter = Unreliable()
    result = run(project, scenario, reporter)
    assert result.ready
    commits = [s.commit for s in result.stories]
    branch = "reqdrive/req-001-demo"
    assert reporter.events == [
        ("run_started", "run-1", branch),
        ("step", "baseline"),
        ("step", "plan"),
        ("plan", ("US-001", "US-002")),
        ("step", "implement"),
        ("story_started", "US-001", 1),
        ("pushed", branch, commits[0]),
        ("story_finished", "US-001", "passed", commits[0]),
        ("story_started", "US-002", 1),
        ("pushed", branch, commits[1]),
        ("story_finished", "US-002", "passed", commits[1]),
        ("step", "verify"),
        ("step", "deliver"),
        ("finished", True, result.head_sha),
    ]


def test_a_failed_run_is_reported_once_with_its_step_and_redacted_message(
    make_project: MakeProject,
) -> None:
    project = make_project()
    scenario = project.scenario({"plan": [{"prd_raw": "{not json"}, {"prd_raw": "[]"}]})
    reporter = Unreliable()
    with pytest.raises(PrdError):
        run(project, scenario, reporter)
    endings = [e for e in reporter.events if e[0] in ("finished", "failed")]
    assert len(endings) == 1
    assert endings[0][:3] == ("failed", "plan", "PrdError")
    assert "planning failed 2 times" in endings[0][3]
    assert reporter.events[-1] == endings[0]
