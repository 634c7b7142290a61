"""The plan step: the agent writes prd.json without changing the repository, in two attempts."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from worker.agents import AgentOutcome
from worker.exceptions import PrdError, RunCancelled
from worker.prd import MAX_STORIES, MIN_STORIES, Prd, parse_prd
from worker.prompting import PLAN_TEMPLATE, PromptRenderer
from worker.redact import Redactor
from worker.run_folder import PRD_JSON, RunFolder
from worker.scope import tree_state, undo_planning_changes

PLAN_ATTEMPTS = 2

CallAgent = Callable[[str, str], AgentOutcome]  # (label, prompt) -> what the agent did


@dataclass(frozen=True)
class Planner:
    """Asks the agent for a valid plan; each attempt must leave the worktree as it found it."""

    worktree: Path
    branch: str
    folder: RunFolder
    renderer: PromptRenderer
    call_agent: CallAgent
    timeout_s: float
    redactor: Redactor
    cancel: threading.Event

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
        prd_path = self.folder.file(PRD_JSON)
        prd_path.unlink(missing_ok=True)
        prompt = self.renderer.render(
            PLAN_TEMPLATE,
            attempt=number,
            max_attempts=PLAN_ATTEMPTS,
            prd_path=str(prd_path),
            min_stories=max(MIN_STORIES, 3),
            max_stories=MAX_STORIES,
            previous_error=problem,
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
        if not prd_path.exists():
            raise PrdError(f"the agent did not write prd.json to {prd_path}")
        return parse_prd(self.redactor.redact(prd_path.read_text(errors="replace")))
