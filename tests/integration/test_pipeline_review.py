"""The blind review with the scripted agent: a story's criteria held against a blind description."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import SUPPORT
from tests.integration.test_pipeline import MakeProject, Project, implement, prd
from tests.integration.test_pipeline import make_project as make_project
from tests.integration.test_pipeline_judging import GATE_PATH
from tests.integration.test_pipeline_resume import PricedRunner
from tests.support.pytest_command import PLAIN_PYTEST
from worker.confine.sandbox import Sandbox
from worker.model.review import ReviewOutcome
from worker.model.state import AttemptOutcome, RunResult, StopReason, StoryState
from worker.report.console import ConsoleReporter
from worker.review.blindness import first_leak, sentences
from worker.run.checkpoint_file import FileCheckpointStore
from worker.run.pipeline import Pipeline
from worker.run.spec import Requirement

REQUIREMENT = (
    "# REQ-001 Shouting\n\n"
    "Teams want a helper that makes a message loud for the alerts channel.\n\n"
    "## Acceptance criteria\n\n"
    "- The helper turns every letter of the message into a capital letter\n"
    "- The loud message always finishes with an exclamation mark\n"
)
CRITERIA = [
    "The helper turns every letter of the message into a capital letter",
    "The loud message always finishes with an exclamation mark",
]
REQUIREMENT_SPEC = Requirement(
    text=REQUIREMENT,
    source="docs/requirements/REQ-001-demo.md",
    slug="req-001-demo",
    repo_path="docs/requirements/REQ-001-demo.md",
)
TITLE = "Make alert messages loud for the channel"
DESCRIPTION = "As an operator I want loud alert messages so that nobody misses them"
TEST = (
    "from shout import shout\n\n\n"
    "def test_shout_upper():\n    assert shout('hi').startswith('HI')\n"
)
SKIPS = {"write": {"shout.py": "def shout(text):\n    return text.upper()\n", "test_s.py": TEST}}
FIXED = {
    "write": {"shout.py": "def shout(text):\n    return text.upper() + '!'\n", "test_s.py": TEST}
}
# Agent B says what the diff does; agent C finds criterion 2 unmet unless B saw the "!".
DESCRIBE = [
    {
        "when": ["+ '!'"],
        "summary": "Adds shout(), which upper-cases its input and appends an exclamation mark.",
        "behaviours": ["shout(text) returns text.upper() + '!'", "adds a test of shout()"],
    },
    {
        "when": ["text.upper()"],
        "summary": "Adds shout(), which upper-cases its input.",
        "behaviours": ["shout(text) returns text.upper()", "adds a test of shout()"],
    },
]
# (The requirement in C's prompt says "exclamation mark" too: the rule keys on B's words.)
COMPARE_SKIPPED = {
    "unless": ["appends an exclamation"],
    "unmet": [2],
    "evidence": "EVIDENCE-NO-BANG",
}


def shout_prd() -> dict[str, Any]:
    story = {
        "id": "US-001",
        "title": TITLE,
        "description": DESCRIPTION,
        "acceptanceCriteria": CRITERIA,
        "priority": 1,
        "passes": False,
        "attempts": 0,
        "notes": "",
    }
    return {"version": "1", "project": "Shout", "sourceReq": "REQ-001", "userStories": [story]}


def shout_project(make_project: MakeProject, config: dict[str, Any] | None = None) -> Project:
    return make_project(
        config={
            "testCommand": PLAIN_PYTEST,
            **(config or {}),
        },
        files={"docs/requirements/REQ-001-demo.md": REQUIREMENT},
    )


def run(project: Project, scenario: dict[str, Any], **extra: Any) -> RunResult:
    data = {
        "plan": [{"prd": shout_prd()}],
        "review_log": str(project.tmp / "review.log"),
        **scenario,
    }
    return project.run(
        project.scenario(data), gate_path=GATE_PATH, requirement=REQUIREMENT_SPEC, **extra
    )


def review_calls(project: Project) -> list[str]:
    log = project.tmp / "review.log"
    return log.read_text().splitlines() if log.exists() else []


def pr_body(project: Project) -> str:
    return (project.run_dir() / "pr.md").read_text()


def test_a_story_skipping_a_criterion_is_sent_back_with_the_finding_and_then_fixed(
    make_project: MakeProject,
) -> None:
    project = shout_project(make_project)
    result = run(
        project,
        {"stories": {"US-001": [SKIPS, FIXED]}, "describe": DESCRIBE, "compare": [COMPARE_SKIPPED]},
    )

    [story] = result.stories
    assert story.state is StoryState.PASSED
    first, second = story.attempts
    assert first.outcome is AttemptOutcome.CRITERIA_UNMET
    assert first.commit is None  # sent back: its commit is not on the branch
    assert first.review is not None and first.review.outcome is ReviewOutcome.UNMET
    assert [f.criterion for f in first.review.unmet] == [CRITERIA[1]]
    # The finding is the next attempt's feedback.
    retry_prompt = (project.run_dir() / "iteration-2.prompt.md").read_text()
    assert "EVIDENCE-NO-BANG" in retry_prompt and "criteria not met" in retry_prompt
    assert second.outcome is AttemptOutcome.PASSED
    assert second.review is not None and second.review.outcome is ReviewOutcome.CLEAN
    # Sent back to its frozen tests: the second attempt made no tests call and its code
    # went on the commit the first attempt's tests were frozen in.
    assert first.frozen_commit is not None and second.frozen_commit == first.frozen_commit
    assert not (project.run_dir() / "iteration-2-tests.prompt.md").exists()
    assert project.branch_log() == [f"test: [US-001] - {TITLE}", f"feat: [US-001] - {TITLE}"]
    # The blind reviewer was shown the story's whole change: its frozen test and its code.
    shown = (project.run_dir() / "review-US-001.iteration-2.describe-1.prompt.md").read_text()
    assert "- `test_s.py`" in shown and "- `shout.py`" in shown
    # Each story review is B then C. The whole change is this one story's change, reviewed
    # already against the same criteria: its review is the whole change's, not asked again.
    assert review_calls(project) == ["describe 1", "compare 1"] * 2
    assert result.ready and result.review is not None
    assert result.review == second.review
    progress = (project.run_dir() / "progress.txt").read_text()
    assert "review of the whole requirement: 2 of 2 criteria met (its story's)" in progress
    body = pr_body(project)
    assert "| 2 of 2 criteria met |" in body
    assert "- tests: 1 fail→pass, 1 pass→pass" in body
    assert "blind review (a model's opinion): 2 of 2 criteria met" in body
    kept = sorted(p.name for p in project.run_dir().glob("review-US-001.iteration-1.*.json"))
    assert kept == [
        "review-US-001.iteration-1.description-1.json",
        "review-US-001.iteration-1.discrepancies-1.json",
    ]
    report = json.loads((project.run_dir() / kept[1]).read_text())
    assert report["criteria"][1]["status"] == "not met"
    summary = json.loads((project.run_dir() / "verification-summary.json").read_text())
    assert summary["review"] == {
        "stories": {"US-001": "2 of 2 criteria met"},
        "whole_change": "2 of 2 criteria met",
    }


def test_a_story_that_keeps_skipping_a_criterion_ends_needs_review_with_the_finding_in_the_pr(
    make_project: MakeProject,
) -> None:
    project = shout_project(make_project, {"maxStoryRetries": 2})
    result = run(
        project,
        {"stories": {"US-001": [SKIPS]}, "describe": DESCRIBE, "compare": [COMPARE_SKIPPED]},
    )

    [story] = result.stories
    assert story.state is StoryState.NEEDS_REVIEW  # its tests passed; never "passed"
    assert [a.outcome for a in story.attempts] == [
        AttemptOutcome.CRITERIA_UNMET,
        AttemptOutcome.NEEDS_REVIEW,
    ]
    assert story.commit is not None and story.attempts[-1].commit == story.commit
    assert project.branch_log() == [f"test: [US-001] - {TITLE}", f"feat: [US-001] - {TITLE}"]
    assert not result.ready
    assert result.review is None  # a draft anyway: the whole change is not reviewed
    body = pr_body(project)
    assert "**Draft**" in body
    assert "| 🔎 | US-001 |" in body and "| 1 of 2 criteria met |" in body
    assert f"{CRITERIA[1]} — not met: EVIDENCE-NO-BANG" in body


def test_behaviour_nobody_asked_for_is_listed_for_the_reviewer_of_the_pr(
    make_project: MakeProject,
) -> None:
    project = shout_project(make_project)
    extra = "shout() also writes every message to /tmp/shout.log"
    result = run(
        project,
        {
            "stories": {"US-001": [FIXED]},
            "describe": DESCRIBE,
            "compare": [{"when": ["appends an exclamation"], "extra": [extra]}],
        },
    )

    [story] = result.stories
    assert story.state is StoryState.PASSED  # listed, not refused
    review = story.attempts[-1].review
    assert review is not None and review.extra_behaviour == [extra]
    body = pr_body(project)
    assert f"- not asked for (review): {extra}" in body
    assert "| 2 of 2 criteria met; 1 extra behaviour |" in body


def test_a_malformed_review_is_refused_and_asked_for_once_more(make_project: MakeProject) -> None:
    project = shout_project(make_project)
    result = run(
        project,
        {
            "stories": {"US-001": [FIXED]},
            "describe": [{"attempt": 1, "raw": "it shouts, I think"}, *DESCRIBE],
            "compare": [{"attempt": 1, "raw": json.dumps({"criteria": []})}],
        },
    )

    [story] = result.stories
    assert story.state is StoryState.PASSED
    review = story.attempts[-1].review
    assert review is not None and review.outcome is ReviewOutcome.CLEAN
    assert review.calls == 4
    assert review_calls(project)[:4] == ["describe 1", "describe 2", "compare 1", "compare 2"]
    retry = project.run_dir() / "review-US-001.iteration-1.describe-2.prompt.md"
    assert "Your previous description was refused" in retry.read_text()
    assert "description.json is not JSON" in retry.read_text()
    compare_retry = project.run_dir() / "review-US-001.iteration-1.compare-2.prompt.md"
    assert "criterion 1, 2 not judged" in compare_retry.read_text()


def test_a_review_malformed_twice_is_reported_and_the_story_needs_review(
    make_project: MakeProject,
) -> None:
    project = shout_project(make_project)
    result = run(
        project,
        {"stories": {"US-001": [FIXED]}, "describe": [{"raw": "[]"}]},
    )

    [story] = result.stories
    assert story.state is StoryState.NEEDS_REVIEW
    [attempt] = story.attempts  # not the implementer's fault: no attempt spent on it
    assert attempt.outcome is AttemptOutcome.NEEDS_REVIEW
    assert "the blind review could not be done" in attempt.reason
    assert "refused twice" in attempt.reason
    assert review_calls(project) == ["describe 1", "describe 2"]  # C never called
    assert "review incomplete: the blind reviewer's description was refused twice" in pr_body(
        project
    )


def test_review_off_runs_no_reviewer(make_project: MakeProject) -> None:
    project = shout_project(make_project, {"review": "off"})
    result = run(project, {"stories": {"US-001": [SKIPS]}, "compare": [COMPARE_SKIPPED]})

    [story] = result.stories
    assert story.state is StoryState.PASSED
    assert story.attempts[-1].review is None and result.review is None
    assert review_calls(project) == []
    assert list(project.run_dir().glob("review-*")) == []
    assert "| not reviewed |" in pr_body(project)


def test_the_repository_s_own_review_prompt_is_the_one_the_blind_reviewer_reads(
    make_project: MakeProject,
) -> None:
    own = (
        "Review role: describe\nReview attempt: {{ attempt }} of {{ max_attempts }}\n"
        "HOUSE REVIEW PROMPT\nWrite to {{ output_path }}\n{{ diff }}\n"
    )
    project = make_project(
        config={"testCommand": PLAIN_PYTEST},
        files={
            "docs/requirements/REQ-001-demo.md": REQUIREMENT,
            ".reqdrive/prompts/describe.md.j2": own,
        },
    )
    result = run(project, {"stories": {"US-001": [FIXED]}, "describe": DESCRIBE})

    [story] = result.stories
    assert story.state is StoryState.PASSED
    shown = (project.run_dir() / "review-US-001.iteration-1.describe-1.prompt.md").read_text()
    assert shown.startswith("Review role: describe\nReview attempt: 1 of 2\nHOUSE REVIEW PROMPT")
    assert "+ '!'" in shown
    # The story's own prompts are the built-in ones: the override is the review's alone.
    assert "HOUSE REVIEW PROMPT" not in (project.run_dir() / "iteration-1.prompt.md").read_text()
    compared = (project.run_dir() / "review-US-001.iteration-1.compare-1.prompt.md").read_text()
    assert "HOUSE REVIEW PROMPT" not in compared


def test_a_change_quoting_the_requirement_is_never_shown_to_the_blind_reviewer(
    make_project: MakeProject,
) -> None:
    project = shout_project(make_project)
    quoting = {"write": {**FIXED["write"], "NOTES.md": f"Done: {CRITERIA[0].lower()}.\n"}}
    result = run(project, {"stories": {"US-001": [quoting]}})

    [story] = result.stories
    assert story.state is StoryState.NEEDS_REVIEW
    assert "refused to call the blind reviewer" in story.attempts[-1].reason
    assert "NOTES.md in the commit quotes the requirement" in story.attempts[-1].reason
    assert review_calls(project) == []


def test_wording_the_repository_held_before_the_change_does_not_stop_the_review(
    make_project: MakeProject,
) -> None:
    # A requirement written from a real project quotes it (a test's name, a docstring); the
    # repository saying so before the story tells the blind reviewer nothing new. Seen on a
    # real project (mpath): its old test's title was the requirement's sentence.
    project = make_project(
        config={"testCommand": PLAIN_PYTEST},
        files={
            "docs/requirements/REQ-001-demo.md": REQUIREMENT,
            "OPERATIONS.md": f"Wanted one day: {CRITERIA[0].lower()}.\n",
        },
    )
    result = run(project, {"stories": {"US-001": [FIXED]}})

    [story] = result.stories
    assert story.state is StoryState.PASSED, story.attempts[-1].reason
    assert review_calls(project)[:2] == ["describe 1", "compare 1"]


def test_the_blind_reviewer_sees_no_word_of_the_requirement_in_its_prompt_or_its_sandbox(
    make_project: MakeProject, sandbox: Sandbox, agent_io: Path
) -> None:
    project = shout_project(make_project)
    # The survey skips what only the test binds in: the scripted agent's interpreter, its
    # code and its scenario (which holds the plan, as a real model's weights would not).
    skip = [sys.prefix, sys.base_prefix, str(SUPPORT), str(agent_io)]
    describe = [{**rule, "survey": True, "skip": skip} for rule in DESCRIBE]
    scenario = agent_io / "scenario.json"
    data = {
        "plan": [{"prd": shout_prd()}],
        "stories": {"US-001": [FIXED]},
        "describe": describe,
        "calls_log": str(agent_io / "calls.log"),
        "review_log": str(agent_io / "review.log"),
    }
    scenario.write_text(json.dumps(data))
    # A run id that is the requirement's slug, as `reqdrive run` names runs: the reviewer's
    # paths must not say it.
    run_id = "req-001-make-alert-messages-loud-for-the-channel"
    result = project.run(
        scenario, gate_path=GATE_PATH, requirement=REQUIREMENT_SPEC, sandbox=sandbox, run_id=run_id
    )
    assert result.stories[0].state is StoryState.PASSED
    assert (agent_io / "review.log").read_text().splitlines()[:2] == ["describe 1", "compare 1"]

    secret = sentences([REQUIREMENT, TITLE, DESCRIPTION, *CRITERIA])
    assert len(secret) >= 5
    run_dir = project.run_dir(run_id)
    prompt = (run_dir / "review-US-001.iteration-1.describe-1.prompt.md").read_text()
    assert "+def shout(text):" in prompt  # it is shown the change...
    assert first_leak(prompt, secret) is None  # ...and not one sentence of the requirement
    for text in (REQUIREMENT, TITLE, DESCRIPTION, *CRITERIA):
        assert text not in prompt
    survey = (run_dir / "review-US-001.iteration-1.describe-1.log").read_text()
    readable = [
        line.split(" ", 1)[1] for line in survey.splitlines() if line.startswith("READABLE")
    ]
    assert any(path.endswith("/shout.py") for path in readable)  # the code it describes
    assert any(path.endswith("/test_s.py") for path in readable)  # and its frozen test
    assert any(path.endswith("/prompt.md") for path in readable)  # its own prompt
    assert not any("REQ-001" in path for path in readable)
    assert not any(path.endswith(("prd.json", "progress.txt", ".git")) for path in readable)
    assert first_leak(survey, secret) is None


def test_the_reviews_cost_is_the_runs_and_counts_against_its_budget(
    make_project: MakeProject,
) -> None:
    # tests: together: one implementer's call per story attempt, so the review's cost is
    # counted beside one call's (what is counted here is the review's share of the budget).
    project = make_project({"budgetUsd": 0.9, "tests": "together"})
    scenario = project.scenario(
        {"plan": [{"prd": prd(3)}], "stories": {f"US-00{n}": [implement(n)] for n in (1, 2, 3)}}
    )
    runner = PricedRunner(project.agent_command(scenario), cost_usd=0.2)
    pipeline = Pipeline(
        project.spec(scenario),
        reporter=ConsoleReporter(io.StringIO()),
        checkpoints=FileCheckpointStore(project.work_dir / "runs"),
        runner=runner,
    )
    result = pipeline.run()
    # plan 0.2; US-001 0.2 and its review 0.4 (0.8); US-002 0.2 (1.0): its review does not
    # start on a spent budget, so its passed tests stand unreviewed; US-003 never starts.
    assert result.stop_reason is StopReason.BUDGET_SPENT
    first, second, third = result.stories
    review = first.attempts[0].review
    assert review is not None and review.cost_usd == pytest.approx(0.4)
    assert first.attempts[0].cost_usd == pytest.approx(0.2)
    assert first.state is StoryState.PASSED
    assert second.state is StoryState.NEEDS_REVIEW
    assert "budget reached" in second.attempts[0].reason
    assert third.state is StoryState.PENDING
    assert result.cost_usd == pytest.approx(1.0)


def test_a_budget_spent_by_the_blind_reviewer_stops_the_review_before_its_next_call(
    make_project: MakeProject,
) -> None:
    # Each reviewer's call is an agent call like any other: checked against the budget before
    # it starts and charged as it ends. plan 0.2, US-001 0.2 (0.4), agent B 0.2 (0.6): the
    # budget is spent, so agent C never starts and the change stays unreviewed.
    project = make_project({"budgetUsd": 0.5, "tests": "together"})
    scenario = project.scenario(
        {"plan": [{"prd": prd(2)}], "stories": {f"US-00{n}": [implement(n)] for n in (1, 2)}}
    )
    runner = PricedRunner(project.agent_command(scenario), cost_usd=0.2)
    pipeline = Pipeline(
        project.spec(scenario),
        reporter=ConsoleReporter(io.StringIO()),
        checkpoints=FileCheckpointStore(project.work_dir / "runs"),
        runner=runner,
    )
    result = pipeline.run()

    assert result.stop_reason is StopReason.BUDGET_SPENT
    first = result.stories[0]
    review = first.attempts[0].review
    assert review is not None and review.outcome is ReviewOutcome.INCOMPLETE
    assert review.calls == 1  # agent B only
    assert review.problem is not None and "budget reached" in review.problem
    assert first.state is not StoryState.PASSED  # its change was not reviewed
    assert result.cost_usd == pytest.approx(0.6)
    assert project.calls().count("US-002 1") == 0
