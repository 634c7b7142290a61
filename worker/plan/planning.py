"""The plan step: the agent writes prd.json without changing the repository, in two attempts."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from worker.agents.base import AgentOutcome
from worker.confine.redact import Redactor
from worker.exceptions import PrdError, RunCancelled
from worker.git.scope import tree_state, undo_planning_changes
from worker.model.prd import MAX_STORIES, MIN_STORIES, Prd, parse_prd
from worker.plan.prompting import PLAN_TEMPLATE, PromptRenderer
from worker.report.run_folder import PRD_JSON, RunFolder, read_handed_over

PLAN_ATTEMPTS = 2
FAILING_SHOWN = 200  # baseline failures listed in the planning prompt

CallAgent = Callable[[str, str], AgentOutcome]  # (label, prompt) -> what the agent did


@dataclass(frozen=True)
class Planner:
    """Asks the agent for a valid plan; each attempt must leave the worktree as it found it."""

    worktree: Path
    handoff: Path  # where the agent writes prd.json: not the run folder, out of its reach
    branch: str
    folder: RunFolder
    renderer: PromptRenderer
    call_agent: CallAgent
    timeout_s: float
    redactor: Redactor
    cancel: threading.Event
    # The base commit's tests by id (None: its checks report no per-test results).
    baseline_tests: Mapping[str, str] | None = field(default=None)

    def plan(self, values: Mapping[str, object], on_attempt: Callable[[int], None]) -> Prd:
        """The first valid plan; `values` fill the prompt (requirement, source, project)."""
        problem = ""
        for attempt in range(1, PLAN_ATTEMPTS + 1):
            on_attempt(attempt)
            try:
                return self.attempt(attempt, problem, values)
            except PrdError as error:
                problem = str(error)
                self.folder.append_progress(f"planning attempt {attempt} failed: {problem}")
        raise PrdError(f"planning failed {PLAN_ATTEMPTS} times; last problem: {problem}")

    def attempt(self, number: int, problem: str, values: Mapping[str, object]) -> Prd:
        """One call of the agent, refused if it changed the repository or wrote no valid plan."""
        prd_path = self.handoff / PRD_JSON
        prd_path.unlink(missing_ok=True)
        prompt = self.renderer.render(
            PLAN_TEMPLATE,
            attempt=number,
            max_attempts=PLAN_ATTEMPTS,
            prd_path=str(prd_path),
            min_stories=max(MIN_STORIES, 3),
            max_stories=MAX_STORIES,
            previous_error=problem,
            failing_tests=self.failing_tests()[:FAILING_SHOWN],
            failing_count=len(self.failing_tests()),
            per_test_results=self.baseline_tests is not None,
            **values,
        )
        before = tree_state(self.worktree)
        outcome = self.call_agent(f"plan-{number}", prompt)
        changed = undo_planning_changes(self.worktree, self.branch, before)
        if self.cancel.is_set():  # not the agent's failure: no second attempt either
            raise RunCancelled("the run was cancelled while planning; no plan was made")
        if changed is not None:
            raise PrdError(
                f"planning must not change the repository, but the agent changed "
                f"{changed}; the changes were reverted"
            )
        if outcome.timed_out:
            raise PrdError(f"the agent timed out after {self.timeout_s:g}s while planning")
        if not prd_path.exists() and not prd_path.is_symlink():
            raise PrdError(f"the agent did not write prd.json to {prd_path}{self.why(outcome)}")
        prd = parse_prd(self.redactor.redact(read_handed_over(prd_path)))
        check_test_claims(prd, self.baseline_tests)
        return prd

    def why(self, outcome: AgentOutcome) -> str:
        """What the agent's call reported, when it failed: without it, an agent that never
        reached its model ("Invalid API key") reads as one that ignored the prompt."""
        reason = outcome.error
        if reason is None and outcome.exit_code not in (0, None):
            reason = f"it exited with code {outcome.exit_code}"
        return f" ({self.redactor.redact(reason)[:500]})" if reason else ""

    def failing_tests(self) -> list[str]:
        """The base commit's failing test ids, which the plan gives to the stories."""
        tests = self.baseline_tests or {}
        return sorted(t for t, status in tests.items() if status == "failed")


def check_test_claims(prd: Prd, known: Mapping[str, str] | None) -> None:
    """Every test a story claims is a test the base commit's checks reported, claimed once."""
    owner: dict[str, str] = {}
    for story in prd.user_stories:
        for test_id in story.tests:
            if known is None:
                raise PrdError(
                    f"prd.json: story {story.id} claims test {test_id!r}, but this repository's "
                    "checks report no per-test results; leave every story's tests empty"
                )
            if test_id not in known:
                raise PrdError(
                    f"prd.json: story {story.id} claims test {test_id!r}, which the checks did "
                    "not report on the base commit; use only the test ids listed in the prompt"
                )
            if test_id in owner and owner[test_id] != story.id:
                raise PrdError(
                    f"prd.json: test {test_id!r} is claimed by {owner[test_id]} and {story.id}; "
                    "give each test to the one story that makes it pass"
                )
            owner[test_id] = story.id
