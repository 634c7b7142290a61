"""The triangular review of one change: agent B describes it blind, agent C compares."""

from __future__ import annotations

import tarfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from worker.agents.base import AgentCall, AgentOutcome, AgentRunner
from worker.agents.pricing import call_cost
from worker.confine.safe_paths import empty_folder
from worker.confine.sandbox import Sandbox
from worker.exceptions import BudgetReached, GitError
from worker.model.review import (
    LIST_ITEMS,
    TEXT_CHARS,
    BlindDescription,
    DiscrepancyReport,
    ReviewFinding,
    ReviewOutcome,
    ReviewRecord,
)
from worker.plan.prompting import PromptRenderer
from worker.report.run_folder import RunFolder
from worker.review.blindness import first_leak, sentences
from worker.review.change_view import change_of, held_at, lay_out, leak_in_files
from worker.review.reports import (
    DESCRIPTION_FILE,
    DISCREPANCIES_FILE,
    read_description,
    read_discrepancies,
)

DESCRIBE_TEMPLATE = "describe.md.j2"
COMPARE_TEMPLATE = "compare.md.j2"
REVIEW_TEMPLATES = (DESCRIBE_TEMPLATE, COMPARE_TEMPLATE)
PROMPTS_DIR = Path(__file__).parent / "prompts"
PROBLEM_CHARS = 2000
TRIES = 2  # a malformed report is refused and asked for once more, then reported
DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class ReviewAgent:
    """Who reviews: a runner (by default the story's, with its cheaper model) and prompts."""

    runner: AgentRunner
    renderer: PromptRenderer
    model: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclass(frozen=True)
class ReviewDesk:
    """Where a review runs: its sandbox, its folders, the run folder its reports go to."""

    agent: ReviewAgent
    sandbox: Sandbox | None  # the run's; None runs the reviewers unconfined
    worktree: Path  # the run's (its git), never shown to a reviewer
    # The reviewers' folders, under a name that says nothing of the run (a run id is often
    # the requirement's slug, and a reviewer sees its own paths): `out` is emptied before
    # each call (the reviewer's HOME and its report), `view` holds the change's files for
    # agent B (read-only), `prompt.md` the call's prompt.
    root: Path
    folder: RunFolder
    cancel: threading.Event
    # How a reviewer's call runs: the run's own checks around it (budgets before it and
    # between its turns, the disk quota after, its cost charged; BudgetReached when spent).
    # None: the runner is called as it is.
    run_call: Callable[[AgentRunner, AgentCall], AgentOutcome] | None = None

    @property
    def handoff(self) -> Path:
        return self.root / "out"

    @property
    def view(self) -> Path:
        return self.root / "view"


@dataclass(frozen=True)
class ReviewSubject:
    """What is reviewed: a commit range and the criteria it is held to."""

    label: str  # names its files in the run folder: review-<label>.*
    title: str  # "US-001", "the whole requirement": C's prompt
    base: str
    head: str
    criteria: Sequence[str]
    requirement: str
    source: str
    # Every text B must not see: the requirement, each story's title, description,
    # criteria and notes.
    hidden_texts: Sequence[str] = ()
    hidden_paths: Sequence[str] = ()  # the requirement's file in the repository


@dataclass
class _Tally:
    calls: int = 0
    cost: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    duration_s: float = 0.0
    reports: list[str] = field(default_factory=list)

    def add(self, outcome: AgentOutcome, model: str | None) -> None:
        self.calls += 1
        self.duration_s += outcome.duration_s
        # As budgets count a call: its reported cost, else its tokens priced, else $0.
        self.cost = _plus(self.cost, call_cost(outcome, model).usd)
        self.input_tokens = _plus_int(self.input_tokens, outcome.input_tokens)
        self.output_tokens = _plus_int(self.output_tokens, outcome.output_tokens)

    def record(self, outcome: ReviewOutcome, **values: Any) -> ReviewRecord:
        return ReviewRecord(
            outcome=outcome,
            reports=list(self.reports),
            calls=self.calls,
            cost_usd=None if self.cost is None else round(self.cost, 6),
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            duration_s=round(self.duration_s, 3),
            **values,
        )


def review(desk: ReviewDesk, subject: ReviewSubject) -> ReviewRecord:
    """Describe the change blind, compare with the criteria: the review's record. Never
    raises for what the change or the reviewers hold: a refusal, a malformed report, a view
    of the change the worker could not make are in the record."""
    tally = _Tally()
    try:
        return _review(desk, subject, tally)
    except (GitError, OSError, tarfile.TarError) as error:
        why = f"the worker could not show the change to the reviewer: {error}"
        return tally.record(ReviewOutcome.INCOMPLETE, problem=why[:PROBLEM_CHARS])
    except BudgetReached as reached:  # before a reviewer's call, or between its turns
        return tally.record(ReviewOutcome.INCOMPLETE, problem=str(reached)[:PROBLEM_CHARS])


def _review(desk: ReviewDesk, subject: ReviewSubject, tally: _Tally) -> ReviewRecord:
    secret = sentences([subject.requirement, *subject.hidden_texts, *subject.criteria])
    # A sentence the repository held before the change is its own wording, which the
    # requirement quotes (a test's name, a docstring): showing it tells B nothing new.
    known = held_at(desk.worktree, subject.base, desk.view, subject.hidden_paths, secret)
    secret = [s for s in secret if s not in known]
    lay_out(desk.worktree, subject.head, desk.view, subject.hidden_paths)
    try:
        leaked = leak_in_files(desk.view, secret)
        if leaked is not None:
            why = f"{leaked[0]} in the commit quotes the requirement (“{leaked[1]}”)"
            return tally.record(ReviewOutcome.REFUSED, problem=_refused(why))
        description, problem = _describe(desk, subject, secret, tally)
    finally:
        empty_folder(desk.view)
    if description is None:
        refused = problem.startswith("refused")
        return tally.record(
            ReviewOutcome.REFUSED if refused else ReviewOutcome.INCOMPLETE, problem=problem
        )
    report, problem = _compare(desk, subject, description, tally)
    if report is None:
        return tally.record(ReviewOutcome.INCOMPLETE, problem=problem, summary=description.summary)
    findings = [
        ReviewFinding(
            criterion=subject.criteria[f.criterion - 1], status=f.status, evidence=f.evidence
        )
        for f in sorted(report.criteria, key=lambda f: f.criterion)
    ]
    met = all(f.status == "met" for f in findings)
    return tally.record(
        ReviewOutcome.CLEAN if met else ReviewOutcome.UNMET,
        findings=findings,
        extra_behaviour=list(report.extra_behaviour),
        summary=description.summary,
    )


def _describe(
    desk: ReviewDesk, subject: ReviewSubject, secret: Sequence[str], tally: _Tally
) -> tuple[BlindDescription | None, str]:
    change = change_of(desk.worktree, subject.base, subject.head)
    fence = "`" * max(3, _longest_backtick_run(change.diff) + 1)
    values = {
        "files": change.files,
        "diff": change.diff,
        "diff_cut": change.diff_cut,
        "fence": fence,
        "max_items": LIST_ITEMS,
        "max_chars": TEXT_CHARS,
    }
    problem = ""
    for attempt in range(1, TRIES + 1):
        prompt = _render(desk, DESCRIBE_TEMPLATE, attempt, problem, values)
        leak = first_leak(prompt, secret)
        if leak is not None:  # the diff quotes it: B would not be blind
            return None, _refused(f"its prompt would quote the requirement (“{leak}”)")
        outcome = _call(desk, subject, f"describe-{attempt}", prompt, cwd=desk.view, tally=tally)
        description, text, problem = read_description(desk.handoff / DESCRIPTION_FILE)
        _keep_report(desk, subject, f"description-{attempt}.json", text, tally)
        if description is not None:
            return description, ""
        problem = _with_agent_error(problem, outcome)
        if desk.cancel.is_set():
            break
    return None, f"the blind reviewer's description was refused twice: {problem}"


def _compare(
    desk: ReviewDesk, subject: ReviewSubject, description: BlindDescription, tally: _Tally
) -> tuple[DiscrepancyReport | None, str]:
    values = {
        "subject": subject.title,
        "criteria": list(subject.criteria),
        "requirement": subject.requirement,
        "source": subject.source,
        "description": description.model_dump(),
    }
    problem = ""
    for attempt in range(1, TRIES + 1):
        prompt = _render(desk, COMPARE_TEMPLATE, attempt, problem, values)
        outcome = _call(desk, subject, f"compare-{attempt}", prompt, cwd=desk.handoff, tally=tally)
        path = desk.handoff / DISCREPANCIES_FILE
        report, text, problem = read_discrepancies(path, len(subject.criteria))
        _keep_report(desk, subject, f"discrepancies-{attempt}.json", text, tally)
        if report is not None:
            return report, ""
        problem = _with_agent_error(problem, outcome)
        if desk.cancel.is_set():
            break
    return None, f"the discrepancy report was refused twice: {problem}"


def _render(
    desk: ReviewDesk, template: str, attempt: int, problem: str, values: dict[str, Any]
) -> str:
    output = DESCRIPTION_FILE if template == DESCRIBE_TEMPLATE else DISCREPANCIES_FILE
    return desk.agent.renderer.render(
        template,
        attempt=attempt,
        max_attempts=TRIES,
        previous_error=problem,
        output_path=str(desk.handoff / output),
        **values,
    )


def _call(
    desk: ReviewDesk, subject: ReviewSubject, step: str, prompt: str, *, cwd: Path, tally: _Tally
) -> AgentOutcome:
    """One reviewer's call: a fresh hand-over folder (its HOME too), the prompt bound alone."""
    name = f"review-{subject.label}.{step}"
    kept = desk.folder.write_text(f"{name}.prompt.md", prompt)  # the run's record, redacted
    prompt_path = desk.root / "prompt.md"
    prompt_path.unlink(missing_ok=True)
    prompt_path.write_text(kept.read_text())
    empty_folder(desk.handoff)
    home = desk.handoff / "home"
    home.mkdir()
    sandbox = desk.sandbox
    if sandbox is not None:
        sandbox = replace(sandbox, readonly_cwd=cwd == desk.view).bind(
            writable=[desk.handoff], readonly=[prompt_path]
        )
    call = AgentCall(
        prompt_file=prompt_path,
        cwd=cwd,
        run_dir=desk.handoff,
        home_dir=home,
        log_path=desk.folder.file(f"{name}.log"),
        timeout_s=desk.agent.timeout_s,
        model=desk.agent.model,
        sandbox=sandbox,
        read_only=True,
    )
    runner = desk.agent.runner
    if desk.run_call is None:
        outcome = runner.run(call, cancel=desk.cancel)
    else:
        outcome = desk.run_call(runner, call)
    tally.add(outcome, desk.agent.model)
    return outcome


def _keep_report(
    desk: ReviewDesk, subject: ReviewSubject, name: str, text: str, tally: _Tally
) -> None:
    """The report as the reviewer wrote it, in the run folder (redacted), then the hand-over
    folder emptied: nothing of this call reaches the next."""
    if text:
        kept = f"review-{subject.label}.{name}"
        desk.folder.write_text(kept, text)
        tally.reports.append(kept)
    empty_folder(desk.handoff)


def _with_agent_error(problem: str, outcome: AgentOutcome) -> str:
    if outcome.error or outcome.exit_code not in (0, None):
        said = outcome.error or f"exit code {outcome.exit_code}"
        return f"{problem} (the reviewer: {said[:500]})"
    return problem


def _refused(why: str) -> str:
    return f"refused to call the blind reviewer: {why}"


def _longest_backtick_run(text: str) -> int:
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    return longest


def _plus(total: float | None, more: float | None) -> float | None:
    if more is None:
        return total
    return more if total is None else total + more


def _plus_int(total: int | None, more: int | None) -> int | None:
    if more is None:
        return total
    return more if total is None else total + more
