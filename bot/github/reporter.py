"""The engine's Reporter for GitHub: one progress comment, a check run and the pull request."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from github.PullRequest import PullRequest

from bot.github.annotations import (
    MAX_ANNOTATIONS,
    annotation_key,
    failure_annotations,
    left_out_note,
    story_failures,
)
from bot.github.client import RepoClient
from bot.github.progress import (
    PROGRESS_MARKER,
    Progress,
    inline_code,
    inline_text,
    money_line,
    next_steps,
)
from bot.github.thread_answers import answer
from bot.stores.runs import RunRecord, RunRecords
from worker.exceptions import BudgetReached, RepoConfigError
from worker.model.gates import GateResult
from worker.model.state import (
    AttemptOutcome,
    AttemptRecord,
    CheckpointStore,
    RunResult,
    StopReason,
    StoryRecord,
    StoryState,
)
from worker.report.inert_text import neutralize
from worker.report.pr_body import render_pr_body
from worker.report.protocol import NullReporter
from worker.report.story_states import count_stories

log = logging.getLogger(__name__)

KEPT = (AttemptOutcome.PASSED, AttemptOutcome.NOTHING_TO_CHANGE, AttemptOutcome.UNVERIFIED)


class Outcome:
    """How a run ended, as the check run's conclusion says it."""

    SUCCESS = "success"
    FAILURE = "failure"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    ACTION_REQUIRED = "action_required"  # a budget stop or a configuration error
    NEUTRAL = "neutral"  # superseded: a newer text of the requirement runs next


# Why the loop stopped → the check run's conclusion when the PR is not ready.
CONCLUSIONS = {
    StopReason.CANCELLED: Outcome.CANCELLED,
    StopReason.BUDGET_SPENT: Outcome.ACTION_REQUIRED,
    StopReason.MONTHLY_BUDGET_SPENT: Outcome.ACTION_REQUIRED,
    StopReason.SUPERSEDED: Outcome.NEUTRAL,
}


class GitHubReporter(NullReporter):  # the agent calls and gate runs as they start: not shown
    """Reports one run on GitHub. At most four API writes per story: the comment when it
    starts, and after a push the PR (opened or updated) and the check run on the new head
    (the previous head's check run is completed, so nothing stays "in progress")."""

    def __init__(
        self,
        client: RepoClient,
        record: RunRecord,
        records: RunRecords,
        *,
        checkpoints: CheckpointStore,
        labels: Sequence[str] = (),
        fallback_sha: Callable[[], str | None] = lambda: None,
        on_meta: Callable[[dict[str, object]], None] | None = None,
        started: float | None = None,
    ) -> None:
        self.client = client
        self.record = record
        self.records = records
        self.checkpoints = checkpoints
        self.labels = list(labels)
        self.fallback_sha = fallback_sha
        self.on_meta = on_meta or (lambda meta: None)
        self.started = started or time.time()
        self.progress = Progress(record.source, record.branch)
        self.ended = False
        self._pull: PullRequest | None = None
        self.head_sha: str | None = record.check_sha
        # Working on a story added after the plan (review feedback, FB-001): its answer in the
        # thread says what happened, so the comment and the PR body wait for the run's end.
        self.added_story = False

    # the Reporter protocol ----------------------------------------------------------------------

    def run_started(self, run_id: str, source: str, branch: str) -> None:
        self.progress.branch = branch
        self.progress.status = "⏳ Preparing the workspace and the plan…"
        self._meta(step="workspace")
        self._comment()

    def step_started(self, step: str) -> None:
        self._meta(step=str(step))

    def plan_ready(self, stories: Sequence[StoryRecord]) -> None:
        self.progress.stories = [s.model_copy() for s in stories]
        self.progress.status = f"📋 Plan: {count_stories(len(stories))}"
        self._meta(step="implement")
        self._comment()

    def story_started(self, story: StoryRecord, attempt: int, iteration: int) -> None:
        self.progress.current = story.id
        self.progress.status = f"🏃 Working on {inline_code(story.id)}, attempt {attempt}"
        self._meta(story=story.id, story_started_at=time.time())
        self.added_story = story.source is not None
        if not self.added_story:
            self._comment()

    def story_finished(self, story: StoryRecord, attempt: AttemptRecord) -> None:
        """A feedback story's writes: the check run on its new head and the old one's
        completion, its reply and its thread resolved: at most four (bench/README.md)."""
        self._keep(story)
        self.progress.current = None
        if attempt.outcome in KEPT and attempt.commit:
            self.branch_pushed(self.record.branch, attempt.commit)
        elif attempt.outcome not in KEPT and not self.added_story:
            self._annotate_failed_attempt(attempt.gates)
        if story.source is not None and self.record.pull_number is not None:
            answer(self.client, self.record.pull_number, story, attempt)

    def branch_pushed(self, branch: str, sha: str) -> None:
        if sha == self.head_sha:
            return  # the engine and story_finished may both say so
        previous_check, previous_sha = self.record.check_run_id, self.head_sha
        self.head_sha = sha
        if not self.added_story or self.record.pull_number is None:
            self._upsert_pull(self._interim_result(sha), ready=False)
        self._check_on_head(sha, status="in_progress")
        if previous_check is not None and previous_sha is not None:
            self._supersede(previous_check, f"The branch moved on to {sha[:12]}.")
        self._save()

    def run_finished(self, result: RunResult) -> None:
        if self.ended:
            return
        self.ended = True
        self.progress.stories = list(result.stories)
        self.progress.current = None
        if result.ready:
            conclusion = Outcome.SUCCESS
            self.progress.status = "✅ Done: every story and the final checks passed."
        else:
            stop = result.stop_reason or StopReason.STORIES_SETTLED
            conclusion = CONCLUSIONS.get(stop, Outcome.FAILURE)
            draft_reason = inline_text(result.draft_reason or "")
            self.progress.status = f"🟡 Finished as a draft: {draft_reason}."
            if result.stop_reason is StopReason.CANCELLED:
                self.progress.status = "⏹️ Cancelled: what passed is pushed; the PR stays a draft."
        self.progress.ending = [
            f"Stopped because: {result.stop_reason}. {money_line(result)}",
            next_steps(result.stories),
        ]
        if result.head_sha != result.base_sha:
            self._upsert_pull(result, ready=result.ready)
        failing = [*result.final_gates, *story_failures(result.stories)]
        self._finish_check(result.head_sha, conclusion, failing)
        self._comment()
        self._save()
        self._meta(step="done")

    def run_failed(
        self, step: str, message: str, *, error_type: str = "", conclusion: str | None = None
    ) -> None:
        if conclusion is None:  # a configuration the user must fix, or a fault
            config = error_type in {RepoConfigError.__name__, BudgetReached.__name__}
            conclusion = Outcome.ACTION_REQUIRED if config else Outcome.FAILURE
            if error_type == "JobTimeoutException":  # rq stopped the job at its timeout
                conclusion = Outcome.TIMED_OUT
        if self.ended:
            return
        self.ended = True
        self.progress.current = None
        self.progress.status = f"❌ Stopped at the {step} step: {inline_text(message)[:1000]}"
        self.progress.ending = [next_steps(self.progress.stories)]
        sha = self.head_sha or self._base_sha() or self.fallback_sha()
        if sha:
            self._finish_check(sha, conclusion, story_failures(self.progress.stories))
        self._comment()
        self._save()

    def note(self, text: str) -> None:
        """A line the comment keeps showing (a resumed run says so)."""
        self.progress.notes.append(text)

    # GitHub ---------------------------------------------------------------------------------

    def _comment(self) -> None:
        target = self.record.comment_target
        if target is None:
            return  # a push's comment goes on its PR, which the first story opens
        body = self.progress.render(self.record.run_id)
        marker = PROGRESS_MARKER.format(run_id=self.record.run_id)
        known = self.record.comment_id
        self.record.comment_id = self.client.upsert_comment(target, marker, body, known_id=known)
        if known is None:
            self._save()

    def _upsert_pull(self, result: RunResult, *, ready: bool) -> None:
        body = render_pr_body(result, closes_issue=self.record.issue_number)
        if self.record.repo_path and self.record.issue_number is None:
            body = f"Requirement: `{self.record.repo_path}`\n\n{body}"
        title = f"reqdrive: {inline_text(result.project or self.record.source)}"
        pull = self._pull
        if pull is None and self.record.pull_number is not None:
            number = self.record.pull_number
            pull = self.client.read(lambda: self.client.repo.get_pull(number))
        if pull is None:
            branch, base = self.record.branch, self.record.base_branch
            pull = self.client.open_pull(
                branch=branch, base=base, title=title, body=body, draft=True
            )
            self.client.add_labels(pull, self.labels)
            if self.record.comment_target is None:
                self.record.comment_target = pull.number
                self._pull = pull
                self.record.pull_number = pull.number
                self._comment()
        else:
            self.client.edit_pull(pull, title=title, body=body)
        self._pull = pull
        self.record.pull_number = pull.number
        if ready or not pull.draft:
            self.client.set_draft(pull, not ready)

    def _check_on_head(self, sha: str, *, status: str) -> None:
        run = self.client.create_check_run(
            sha=sha, external_id=self.record.run_id, status=status, output=self._output()[0]
        )
        self.record.check_run_id, self.record.check_sha = run.id, sha
        self.record.annotated = []

    def _annotate_failed_attempt(self, gates: Sequence[GateResult]) -> None:
        """The open check run shows where the attempt's tests failed (nothing to write when
        there is no check run yet, or no new place to show)."""
        if self.record.check_run_id is None:
            return
        output, sent = self._output(failure_annotations(gates), fresh=False)
        if not sent:
            return
        self.client.update_check_run(self.record.check_run_id, status="in_progress", output=output)
        self.record.annotated += sent
        self._save()

    def _finish_check(self, sha: str, conclusion: str, failing: Sequence[GateResult]) -> None:
        annotations = failure_annotations(failing)
        if self.record.check_run_id is not None and self.record.check_sha == sha:
            output, sent = self._output(annotations, fresh=False)
            self.client.update_check_run(
                self.record.check_run_id, status="completed", conclusion=conclusion, output=output
            )
            self.record.annotated += sent
            return
        output, sent = self._output(annotations, fresh=True)
        run = self.client.create_check_run(
            sha=sha,
            external_id=self.record.run_id,
            status="completed",
            conclusion=conclusion,
            output=output,
        )
        if self.record.check_run_id is not None:  # the one on an older head must not stay open
            self._supersede(self.record.check_run_id, f"The run ended on {sha[:12]}.")
        self.record.check_run_id, self.record.check_sha = run.id, sha
        self.record.annotated = sent

    def _supersede(self, check_run_id: int, summary: str) -> None:
        """An earlier head's check run completes as neutral: nothing stays "in progress"."""
        output = {"title": "Superseded", "summary": summary}
        self.client.update_check_run(
            check_run_id, status="completed", conclusion="neutral", output=output
        )

    def _output(
        self, annotations: Sequence[dict[str, Any]] = (), *, fresh: bool = True
    ) -> tuple[dict[str, Any], list[str]]:
        """The check run's output, with the annotations its run does not have yet (all of
        them on a `fresh` one), and their keys."""
        had = set() if fresh else set(self.record.annotated)
        new = [a for a in annotations if annotation_key(a) not in had]
        send = new[: max(MAX_ANNOTATIONS - len(had), 0)]
        summary = [*self.progress.notes, self.progress.checklist(), *self.progress.ending]
        output: dict[str, Any] = {
            "title": inline_text(self.progress.status)[:200] or "reqdrive",
            "summary": "\n\n".join(
                neutralize(p) for p in [*summary, left_out_note(len(new) - len(send))] if p
            ),
        }
        if send:
            output["annotations"] = send
        return output, [annotation_key(a) for a in send]

    # helpers --------------------------------------------------------------------------------

    def _keep(self, story: StoryRecord) -> None:
        copy = story.model_copy(deep=True)
        self.progress.stories = [copy if s.id == story.id else s for s in self.progress.stories]
        if all(s.id != story.id for s in self.progress.stories):
            self.progress.stories.append(copy)

    def _interim_result(self, sha: str) -> RunResult:
        cp = self.checkpoints.load(self.record.run_id)
        stories = cp.stories if cp else self.progress.stories
        passed = sum(1 for s in stories if s.state is StoryState.PASSED)
        return RunResult(
            run_id=self.record.run_id,
            requirement_source=self.record.source,
            project=cp.prd.project if cp and cp.prd else "",
            branch=self.record.branch,
            base_ref=cp.base_ref if cp else self.record.base_branch,
            base_sha=cp.base_sha if cp else sha,
            head_sha=sha,
            stories=stories,
            final_gates=[],
            baseline_gates=cp.baseline or [] if cp else [],
            ready=False,
            draft_reason=f"in progress: {passed} of {len(stories)} stories passed so far",
            cost_usd=cp.cost_usd if cp else 0.0,
            duration_s=time.time() - self.started,
        )

    def _base_sha(self) -> str | None:
        cp = self.checkpoints.load(self.record.run_id)
        return cp.base_sha if cp else None

    def _meta(self, **values: object) -> None:
        try:
            self.on_meta(values)
        except Exception:  # job.meta is for `reqdrive status`; never worth stopping a run
            log.warning("job meta not saved", extra={"run_id": self.record.run_id})

    def _save(self) -> None:
        self.records.save(self.record)
