"""Run state and checkpoints: what a run has done and decided, saved after every story."""

from __future__ import annotations

import time
from collections.abc import Sequence
from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from worker.exceptions import ResumeError
from worker.model.feedback import CiCheck, StorySource
from worker.model.gates import GateResult
from worker.model.prd import Prd, Story
from worker.model.review import ReviewRecord

FEEDBACK_CHARS = 12_000  # per failing gate, in the next attempt's prompt


class RunStep(StrEnum):
    """Where a run is, so a failure message can say where it stopped."""

    PREFLIGHT = "preflight"
    WORKSPACE = "workspace"
    PLAN = "plan"
    BASELINE = "baseline"
    IMPLEMENT = "implement"
    VERIFY = "verify"
    DELIVER = "deliver"
    DONE = "done"


class RunStatus(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"


class StoryState(StrEnum):
    """The worker's verdict on a story; the agent's own claims never set it."""

    PENDING = "pending"  # not tried yet, or tried and still has attempts left
    PASSED = "passed"  # every test it owns passes, and every test that passed still does
    FAILED = "failed"  # every attempt failed
    # It passed only with a change to what a gate runs (a gate script, conftest.py, test
    # configuration): kept for a person to judge, never called passed.
    NEEDS_REVIEW = "needs review"
    # Its gates fail on the base commit too and give no per-test results, so the worker
    # cannot tell whether this story made things worse. Kept, never retried.
    UNVERIFIED = "unverified"


class AttemptOutcome(StrEnum):
    """How one agent call on a story ended, as the worker judged it."""

    PASSED = "passed"
    # The agent changed nothing, and the story's own tests and every other test pass on the
    # branch as it is: the story is done, judged on its tests, not on what the agent typed.
    NOTHING_TO_CHANGE = "passed (nothing to change)"
    UNVERIFIED = "unverified"
    NEEDS_REVIEW = "needs review"
    GATES_FAILED = "gates failed"
    NO_CHANGES = "no changes"
    AGENT_TIMED_OUT = "agent timed out"
    # The change holds the exact value of a secret (an API key, the worker's token): it
    # would be pushed, and redacting the run folder would not take it back.
    CREDENTIAL_IN_CHANGE = "credential in change"
    # The worker's own steps failed on what the agent left (git refused it, the disk was full,
    # a report was refused): a failed attempt with the reason, never the end of the run.
    CHECK_FAILED = "check failed"
    # Its tests passed, but the blind review found an acceptance criterion not met: the
    # story goes back to the implementer with the finding (on its last attempt it is kept
    # as "needs review" instead, never "passed").
    CRITERIA_UNMET = "criteria not met"
    CANCELLED = "cancelled"  # stopped by the user; does not count as an attempt
    # The tests call left no test the worker could freeze: none that fails without the
    # story's code, one that passes already, or other tests changed state. No code call.
    TESTS_REFUSED = "tests refused"


class StopReason(StrEnum):
    """Why the implement loop stopped."""

    ALL_STORIES_PASSED = "all stories passed"
    STORIES_SETTLED = "no story left to try"  # some failed or are unverified
    MAX_ITERATIONS = "maxIterations reached"
    BUDGET_SPENT = "budget reached (the run's budgetUsd)"
    MONTHLY_BUDGET_SPENT = "budget reached (the installation's monthly budget)"
    CANCELLED = "cancelled"
    SUPERSEDED = "the requirement changed"  # a newer text runs next, on the same branch

    @classmethod
    def _missing_(cls, value: object) -> StopReason | None:
        # Checkpoints saved before the budget stops were named "budget reached".
        return cls.BUDGET_SPENT if value == "budgetUsd spent" else None


class TestCheck(BaseModel):
    """One test a story was judged on: its status before the story and after it."""

    __test__ = False  # a domain name, not a test class for pytest to collect

    id: str
    before: str  # passed, failed, skipped, missing (not reported)
    after: str
    owned: bool = False  # the plan gave it to this story, or the story added it
    added: bool = False  # the story wrote it; `at_parent` is its result without the change
    at_parent: str | None = None
    problem: str = ""  # why this test keeps the story from passing; "" when it does not
    # It passed before and failed with the story, so it ran again alone on both sides: what
    # those runs gave ("" when it was not re-run), and whether that showed it flaky (its
    # result flips without the story's change: kept out of the verdict).
    reruns: str = ""
    flaky: bool = False


class FrozenTests(BaseModel):
    """A story's tests as its tests call wrote them, proven and committed before its code:
    what every implement attempt of the story is judged on."""

    parent: str  # the commit the story started on; frozen tests hold only on it
    commit: str | None = None  # the `test:` commit; None: frozen with no new tests
    tests: list[str] = Field(default_factory=list)  # new or changed tests, each proven
    at_parent: dict[str, str] = Field(default_factory=dict)  # their result on `parent`
    # Existing tests the plan let the story change (changesTests): a person reviews them.
    changed_passing: list[str] = Field(default_factory=list)
    # What the tests call wrote outside the test side: reverted, not frozen.
    reverted: list[str] = Field(default_factory=list)
    proven: bool = True  # False: the checks give no per-test results to prove them with
    # The test modules the proof ran alone on the parent; empty: it ran the whole suite.
    proof_selected: list[str] = Field(default_factory=list)


class AttemptRecord(BaseModel):
    """One agent call on one story and what the worker made of it."""

    iteration: int
    attempt: int
    outcome: AttemptOutcome
    reason: str = ""
    commit: str | None = None
    forbidden_writes: list[str] = Field(default_factory=list)
    refused_tools: list[str] = Field(default_factory=list)  # tool calls the agent was denied
    gates: list[GateResult] = Field(default_factory=list)
    tests: list[TestCheck] = Field(default_factory=list)
    # Files the story changed that decide what a gate runs (its script, conftest.py, ...).
    gate_changes: list[str] = Field(default_factory=list)
    # The frozen tests the attempt was judged on (their `test:` commit), and the test-side
    # files the implement call changed, reverted before any gate ran.
    frozen_commit: str | None = None
    tests_reverted: list[str] = Field(default_factory=list)
    agent_exit_code: int | None = None
    cost_usd: float | None = None
    duration_s: float = 0.0
    # The blind review of its change (worker/review), when its tests passed and it ran.
    review: ReviewRecord | None = None


class StoryRecord(Story):
    """A story of the plan with the worker's verdict and the history of its attempts."""

    # The plan's story stays as planned; the verdict and attempts change as the run goes.
    model_config = ConfigDict(frozen=False)

    state: StoryState = StoryState.PENDING
    attempts: list[AttemptRecord] = Field(default_factory=list)
    # Attempts before a retry asked for it again: kept for the record, no longer counted.
    earlier_attempts: list[AttemptRecord] = Field(default_factory=list)
    commit: str | None = None
    # The story's frozen tests (tests: first); None before its tests call, or not frozen.
    frozen: FrozenTests | None = None
    # Set by the worker, never by a plan: a story appended to fix the repository's failing
    # CI on the pull request (the App's ci_fix job); its tests are those CI failed that the
    # worker reproduced, and without any it may freeze no test of its own.
    ci: CiCheck | None = None
    # Where a story added after the plan came from (a review thread: FB-001); None: planned.
    source: StorySource | None = None

    @property
    def feedback(self) -> str | None:
        """What the last failed attempt's gates said, for the next attempt's prompt."""
        if not self.attempts or self.attempts[-1].outcome is AttemptOutcome.PASSED:
            return None
        last = self.attempts[-1]
        failing = [g for g in last.gates if not g.passed]
        if not failing:
            return last.reason or None
        # The end of a test run's output is where failures are summarised; keep prompts small.
        return "\n\n".join(
            f"$ {g.command}\n{g.output_tail.strip()[-FEEDBACK_CHARS:]}" for g in failing
        )


class Checkpoint(BaseModel):
    """Everything needed to resume a run where it stopped, saved after every story."""

    run_id: str
    requirement_source: str
    requirement_sha256: str = ""  # a resumed run must build the same requirement
    branch: str
    base_ref: str
    base_sha: str
    status: RunStatus = RunStatus.RUNNING
    step: RunStep = RunStep.WORKSPACE
    # The last good commit: passed stories on top of the base. A resumed run starts here.
    head_sha: str
    pushed_sha: str | None = None
    # Where the stories started when that is not the base: the head an earlier run left on
    # the branch (`reqdrive run --continue`, the App's run of an edited requirement).
    start_sha: str | None = None
    iteration: int = 0
    # The iteration a retry started from: maxIterations counts from here.
    retry_from: int = 0
    plan_attempts: int = 0
    prd: Prd | None = None
    stories: list[StoryRecord] = Field(default_factory=list)
    baseline: list[GateResult] | None = None
    # The commit the baseline was measured on, and the cache entry it came from when an
    # earlier run measured the same tree with the same gates (None: measured by this run).
    baseline_sha: str | None = None
    baseline_cached: str | None = None
    cost_usd: float = 0.0
    # The run's cost when a person last asked for it (`/reqdrive run`, a retry): budgetUsd
    # counts from here, as maxIterations counts from retry_from; a takeover keeps it.
    budget_from_usd: float = 0.0
    stop_reason: StopReason | None = None
    error: str | None = None
    started_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)

    @model_validator(mode="before")
    @classmethod
    def _stories_from_older_checkpoints(cls, data: object) -> object:
        """Checkpoints written before the story record was built on the plan's story kept
        each story's description and notes only in the stored PRD: copy them across, so a
        run resumed after an upgrade prompts with the same story."""
        if not isinstance(data, dict) or not isinstance(data.get("prd"), dict):
            return data
        planned = data["prd"].get("userStories", data["prd"].get("user_stories"))
        stories = data.get("stories")
        if not isinstance(planned, list) or not isinstance(stories, list):
            return data
        by_id = {s.get("id"): s for s in planned if isinstance(s, dict)}
        return {**data, "stories": [_with_plan_text(s, by_id) for s in stories]}

    def story(self, story_id: str) -> StoryRecord:
        for record in self.stories:
            if record.id == story_id:
                return record
        raise KeyError(story_id)

    def stories_in(self, *states: StoryState) -> list[StoryRecord]:
        return [s for s in self.stories if s.state in states]

    def retry(self, story_ids: Sequence[str], *, failed: bool = False) -> list[str]:
        """Make stories pending again with no attempts counted: the named ones, and with
        `failed` every story that ended without passing. Returns the ids reset.

        A story already pending is left as it is, so a retried run that is itself resumed
        goes on with the attempts it made. The plan, the branch and other stories are kept.
        """
        check_retry(self, self.run_id, story_ids)
        wanted = set(story_ids)
        reset = []
        for story in self.stories:
            asked = story.id in wanted or (failed and story.state in SETTLED_UNPASSED)
            if asked and story.state is not StoryState.PENDING:
                story.earlier_attempts += story.attempts
                story.state, story.attempts, story.commit = StoryState.PENDING, [], None
                reset.append(story.id)
        if reset:
            self.stop_reason, self.status, self.retry_from = None, RunStatus.RUNNING, self.iteration
        return reset

    def next_story_id(self, prefix: str) -> str:
        """The next free id of a kind of added story: CI-001, CI-002, ..."""
        taken = {s.id for s in self.stories}
        number = 1
        while f"{prefix}-{number:03d}" in taken:
            number += 1
        return f"{prefix}-{number:03d}"

    def add_stories(self, stories: Sequence[StoryRecord]) -> list[str]:
        """Append stories after the plan (review feedback, a CI fix) and make the run go on:
        each pending, after every story already there, maxIterations counted from here. A
        story whose source some story already answers is left out. Returns the ids added."""
        known = {s.source.key for s in self.stories if s.source is not None}
        top = max((s.priority for s in self.stories), default=0)
        added = []
        for story in stories:
            if story.source is not None and story.source.key in known:
                continue
            top += 1
            self.stories.append(story.model_copy(update={"priority": top}))
            added.append(story.id)
        if added:
            if self.prd is not None:  # the plan as prd.json shows it holds them too
                planned = [
                    Story.model_validate(s.model_dump(include=set(Story.model_fields)))
                    for s in self.stories
                    if s.id in added
                ]
                self.prd = self.prd.model_copy(
                    update={"user_stories": [*self.prd.user_stories, *planned]}
                )
            self.stop_reason, self.status, self.retry_from = None, RunStatus.RUNNING, self.iteration
        return added


def check_retry(checkpoint: Checkpoint | None, run_id: str, story_ids: Sequence[str]) -> None:
    """Refuse a retry of a run never started or of stories its plan does not have."""
    if checkpoint is None:
        raise ResumeError(f"nothing to retry: run {run_id} has no checkpoint; start it first")
    known = [s.id for s in checkpoint.stories]
    unknown = [i for i in story_ids if i not in known]
    if unknown:
        raise ResumeError(
            f"cannot retry {', '.join(unknown)}: the plan has "
            + (", ".join(known) if known else "no stories yet")
        )


def _with_plan_text(story: object, planned: dict[object, dict[str, object]]) -> object:
    if not isinstance(story, dict) or story.get("id") not in planned:
        return story
    plan = planned[story["id"]]
    return {k: plan[k] for k in ("description", "notes") if k in plan} | story


def select_next_story(
    stories: Sequence[StoryRecord], *, max_story_retries: int
) -> StoryRecord | None:
    """The story to work on next: pending (not passed, not settled), under the retry limit.

    Lowest priority number first, then id, so the same state always gives the same story.
    """
    candidates = [
        s for s in stories if s.state is StoryState.PENDING and len(s.attempts) < max_story_retries
    ]
    return min(candidates, key=lambda s: (s.priority, s.id), default=None)


# Stories that ended without passing: what "retry every failed story" runs again.
SETTLED_UNPASSED = (StoryState.FAILED, StoryState.UNVERIFIED, StoryState.NEEDS_REVIEW)


# Here with the model, not beside either store: the engine saves through it and the App's
# reporter reads through it, neither importing the machinery behind one store or the other.
class CheckpointStore(Protocol):
    """Where checkpoints live: a file beside the run for local runs
    (worker/run/checkpoint_file.py), Redis for the App (bot/stores/checkpoints.py)."""

    def load(self, run_id: str) -> Checkpoint | None: ...

    def save(self, checkpoint: Checkpoint) -> None: ...


class RunResult(BaseModel):
    """What a run achieved, for the PR body, the console and the job's return value."""

    run_id: str
    requirement_source: str
    project: str
    branch: str
    base_ref: str
    base_sha: str
    head_sha: str
    start_sha: str | None = None  # the checkpoint's: None when the stories started on the base
    stories: list[StoryRecord]
    final_gates: list[GateResult]
    baseline_gates: list[GateResult]
    fixed_tests: list[str] = Field(default_factory=list)
    remaining_tests: list[str] = Field(default_factory=list)
    # Tests failing on the final branch, each with the reason a reader needs.
    still_failing: dict[str, str] = Field(default_factory=dict)
    # Baseline failures no story claimed: kept as final checks.
    unclaimed_tests: list[str] = Field(default_factory=list)
    per_test_results: bool = False  # did any check report results per test id?
    # Tests a story's re-runs showed flaky: kept out of the verdict, with why.
    flaky_tests: dict[str, str] = Field(default_factory=dict)
    # Where the final checks' results came from when they were not run again: the attempt
    # that judged the head commit with the same gates ("iteration 3 (US-002 attempt 1)").
    final_gates_from: str | None = None
    baseline_cached: str | None = None  # the checkpoint's
    # Gates failing on the branch and on the base alike, the branch adding none of their
    # findings: gate name -> what the PR body says. Not the branch's doing, so no draft.
    failing_on_base: dict[str, str] = Field(default_factory=dict)
    ready: bool
    draft_reason: str | None = None
    stop_reason: StopReason | None = None  # None while the run is still going (a PR mid-run)
    cost_usd: float = 0.0
    duration_s: float = 0.0
    run_dir: str = ""
    # The blind review of the whole change before the PR was marked ready, when it ran.
    review: ReviewRecord | None = None

    def count(self, state: StoryState) -> int:
        return sum(1 for s in self.stories if s.state is state)
