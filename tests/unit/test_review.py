"""The blind review's pure parts: the blindness check, the reports' schema, the decision."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.github.progress import Progress
from worker.model.review import (
    CriterionStatus,
    DiscrepancyReport,
    ReviewFinding,
    ReviewOutcome,
    ReviewRecord,
)
from worker.model.state import AttemptOutcome, AttemptRecord, StoryRecord, TestCheck
from worker.review.blindness import first_leak, sentences
from worker.review.reports import read_description, read_discrepancies
from worker.verdict.story_verdict import StoryVerdict, decide_reviewed, ready_after_review

CRITERIA = ["The helper turns every letter into a capital", "It ends with an exclamation mark"]


def test_a_sentence_of_the_requirement_is_found_whatever_its_case_and_punctuation() -> None:
    secret = sentences(["# REQ-1\n\nShout it.  The helper turns every letter into a capital!"])
    assert secret == ["the helper turns every letter into a capital"]  # "shout it" is too short
    assert first_leak("# NOTE: the helper TURNS every letter\ninto a capital", secret)
    assert first_leak("def shout(text):\n    return text.upper()", secret) is None
    # A sentence is found as whole words only.
    assert first_leak("rethe helper turns every letter into a capitals", secret) is None


def report(statuses: list[str], extra: list[str] | None = None) -> str:
    criteria = [
        {"criterion": n, "status": s, "evidence": f"evidence {n}"}
        for n, s in enumerate(statuses, start=1)
    ]
    return json.dumps({"criteria": criteria, "extra_behaviour": extra or []})


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not json", "is not JSON"),
        (report(["met"]), "criterion 2 not judged"),
        (report(["met", "met", "met"]), "there is no criterion 3"),
        (report(["met", "probably"]), "criteria[1].status"),
        (json.dumps({"criteria": [], "verdict": "ok"}), "verdict"),
    ],
)
def test_a_malformed_discrepancy_report_is_refused_with_its_reason(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "discrepancies.json"
    path.write_text(text)
    found, _, why = read_discrepancies(path, 2)
    assert found is None and problem in why


def test_a_valid_report_and_a_description_behind_a_link_are_read_as_the_worker_reads_prd(
    tmp_path: Path,
) -> None:
    path = tmp_path / "discrepancies.json"
    path.write_text(report(["met", "not shown"], ["writes a log"]))
    found, _, why = read_discrepancies(path, 2)
    assert why == "" and found is not None
    assert [f.status for f in found.criteria] == [CriterionStatus.MET, CriterionStatus.NOT_SHOWN]
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"summary": "s", "behaviours": ["b"]}))
    (tmp_path / "description.json").symlink_to(secret)
    description, _, why = read_description(tmp_path / "description.json")
    assert description is None and "cannot be read as a plain file" in why
    assert DiscrepancyReport.model_validate_json(report(["met"])).extra_behaviour == []


def review(outcome: ReviewOutcome, *unmet: str) -> ReviewRecord:
    findings = [ReviewFinding(criterion=CRITERIA[0], status=CriterionStatus.MET)]
    findings += [
        ReviewFinding(criterion=c, status=CriterionStatus.NOT_MET, evidence="no '!'") for c in unmet
    ]
    return ReviewRecord(outcome=outcome, findings=findings, problem="malformed twice")


PASSED = StoryVerdict(AttemptOutcome.PASSED, "")


@pytest.mark.parametrize(
    ("found", "number", "outcome", "said"),
    [
        (review(ReviewOutcome.CLEAN), 1, AttemptOutcome.PASSED, ""),
        (review(ReviewOutcome.UNMET, CRITERIA[1]), 1, AttemptOutcome.CRITERIA_UNMET, "no '!'"),
        (review(ReviewOutcome.UNMET, CRITERIA[1]), 3, AttemptOutcome.NEEDS_REVIEW, "after 3"),
        (review(ReviewOutcome.INCOMPLETE), 1, AttemptOutcome.NEEDS_REVIEW, "malformed twice"),
        (review(ReviewOutcome.REFUSED), 1, AttemptOutcome.NEEDS_REVIEW, "could not be done"),
    ],
)
def test_the_review_can_keep_a_story_from_passed_and_sends_it_back_while_attempts_remain(
    found: ReviewRecord, number: int, outcome: AttemptOutcome, said: str
) -> None:
    verdict = decide_reviewed(PASSED, found, number=number, max_retries=3)
    assert verdict.outcome is outcome and said in verdict.reason


def test_the_review_never_makes_a_failed_attempt_pass() -> None:
    failed = StoryVerdict(AttemptOutcome.GATES_FAILED, "t1 still fails")
    assert decide_reviewed(failed, review(ReviewOutcome.CLEAN), number=1, max_retries=3) == failed


def test_the_whole_change_review_keeps_a_pr_a_draft_only_when_it_found_something() -> None:
    assert ready_after_review(None) is None
    assert ready_after_review(review(ReviewOutcome.CLEAN)) is None
    why = ready_after_review(review(ReviewOutcome.UNMET, CRITERIA[1]))
    assert why is not None and CRITERIA[1] in why


def test_the_progress_comment_shows_tests_and_the_review_per_story() -> None:
    found = review(ReviewOutcome.UNMET, CRITERIA[1])
    found.extra_behaviour.append("pings @octocat on every call")
    tests = [
        TestCheck(
            id="t_new", before="missing", after="passed", owned=True, added=True, at_parent="failed"
        ),
        TestCheck(id="t_old", before="passed", after="passed"),
    ]
    attempt = AttemptRecord(
        iteration=1, attempt=1, outcome=AttemptOutcome.CRITERIA_UNMET, tests=tests, review=found
    )
    story = StoryRecord(
        id="US-001", title="Shout", acceptance_criteria=CRITERIA, priority=1, attempts=[attempt]
    )
    text = Progress(source="REQ-1", branch="b", stories=[story]).render("run-1")
    assert "tests: 1 fail→pass, 1 pass→pass; blind review: 1 of 2 criteria met" in text
    assert f"review finding: {CRITERIA[1]} — not met: no '!'" in text
    assert "@octocat" not in text  # the reviewer's words cannot ping anyone
