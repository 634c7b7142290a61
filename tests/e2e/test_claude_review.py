"""The blind review with the real Claude Code CLI behind a scripted Messages API: the same CLI
implements the story, describes its change blind (agent B) and compares (agent C)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.e2e.test_claude_runner import CLI_OWN
from tests.integration.test_pipeline import MakeProject, Project, project_factory
from tests.integration.test_pipeline_review import (
    CRITERIA,
    REQUIREMENT,
    REQUIREMENT_SPEC,
    TEST,
    TITLE,
    shout_prd,
    shout_project,
)
from tests.support.claude_cli import install_claude_cli
from tests.support.fake_anthropic import (
    FakeAnthropic,
    RecordedRequest,
    ToolCall,
    Turn,
    Usage,
    fake_anthropic,
    say,
    use,
)
from worker.agents.claude import REVIEW_TOOLS
from worker.model.review import ReviewOutcome
from worker.model.state import AttemptOutcome, RunResult, StoryState
from worker.review.blindness import first_leak, sentences
from worker.run.review_step import review_root

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FAKE_API_KEY = "fake-anthropic-key-review-5c02"
GATE_PATH = f"{Path(sys.executable).parent}:/usr/bin:/bin"
UPPER = "def shout(text):\n    return text.upper()\n"
LOUD = "def shout(text):\n    return text.upper() + '!'\n"
# The implement call's and each reviewer's usage, told apart in the cost the CLI reports.
IMPLEMENT_USAGE = Usage(input_tokens=2000, output_tokens=400)
REVIEW_USAGE = Usage(input_tokens=600, output_tokens=80)


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    return install_claude_cli()


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def write(path: Path, text: str, usage: Usage = IMPLEMENT_USAGE) -> Turn:
    return use(ToolCall("Write", {"file_path": str(path), "content": text}), usage=usage)


def worktree(project: Project) -> Path:
    return project.work_dir / "cache" / "worktrees" / "run-1"


def write_tests(project: Project) -> list[Turn]:
    """The story's tests call (tests first): its test, proven failing and frozen by the worker;
    a story sent back by the review keeps them, so it is made once per story."""
    return [write(worktree(project) / "test_s.py", TEST), say("test written.")]


def implement(project: Project, code: str) -> list[Turn]:
    """An implement call: the code, on the story's frozen test."""
    return [write(worktree(project) / "shout.py", code), say("shout done.", usage=IMPLEMENT_USAGE)]


def describe(project: Project, *, loud: bool) -> list[Turn]:
    behaviour = "shout(text) returns text.upper()" + (" + '!'" if loud else "")
    summary = "Adds shout(), which upper-cases its input" + (
        " and appends an exclamation mark." if loud else "."
    )
    text = json.dumps({"summary": summary, "behaviours": [behaviour, "adds a test of shout()"]})
    return [
        write(handoff(project) / "description.json", text, usage=REVIEW_USAGE),
        say("described.", usage=REVIEW_USAGE),
    ]


def compare(project: Project, *, second: str, extra: list[str] | None = None) -> list[Turn]:
    criteria = [
        {"criterion": 1, "status": "met", "evidence": "returns text.upper()"},
        {"criterion": 2, "status": second, "evidence": "EVIDENCE-FROM-C: no exclamation mark"},
    ]
    report = json.dumps({"criteria": criteria, "extra_behaviour": extra or []})
    return [
        write(handoff(project) / "discrepancies.json", report, usage=REVIEW_USAGE),
        say("compared.", usage=REVIEW_USAGE),
    ]


def handoff(project: Project) -> Path:
    """Where the reviewers hand their reports over (named by a hash of the run id)."""
    return review_root(project.work_dir, "run-1") / "out"


def plan_handoff(project: Project) -> Path:
    return project.work_dir / "handoff" / "run-1"


def plan(project: Project) -> list[Turn]:
    return [write(plan_handoff(project) / "prd.json", json.dumps(shout_prd())), say("Planned.")]


def run_with_claude(project: Project, server: FakeAnthropic, claude_bin: Path) -> RunResult:
    env = {
        "PATH": f"{claude_bin.parent}{os.pathsep}{os.environ['PATH']}",
        "LANG": "C.UTF-8",
        "ANTHROPIC_API_KEY": FAKE_API_KEY,
        "ANTHROPIC_BASE_URL": server.url,
    }
    return project.run(
        project.scenario({}),
        agent_runner="claude",
        agent_command=None,
        source_env=env,
        gate_path=GATE_PATH,
        requirement=REQUIREMENT_SPEC,
    )


def role(request: RecordedRequest) -> str:
    prompt = request.prompt()
    for name in ("describe", "compare"):
        if f"Review role: {name}" in prompt:
            return name
    if "Story ID:" in prompt:
        return "tests" if "Phase: tests" in prompt else "story"
    return "plan"


def first_requests(server: FakeAnthropic) -> list[RecordedRequest]:
    """The first request of each CLI call: no reply of the model's in it yet."""
    requests = server.message_requests()
    return [r for r in requests if all(m.get("role") != "assistant" for m in r.messages)]


def test_a_story_skipping_a_criterion_is_sent_back_by_the_review_and_then_fixed(
    make_project: MakeProject, claude_bin: Path
) -> None:
    project = shout_project(make_project)
    script = [
        *plan(project),
        *write_tests(project),
        *implement(project, UPPER),
        *describe(project, loud=False),
        *compare(project, second="not met"),
        *implement(project, LOUD),  # on the frozen test: no second tests call
        *describe(project, loud=True),
        *compare(project, second="met"),
    ]
    with fake_anthropic(script) as server:
        result = run_with_claude(project, server, claude_bin)
        calls = first_requests(server)

    story_calls = ["story", "describe", "compare"]  # an implement call and its review
    # The whole change is this one story's, reviewed already: no model is asked again.
    assert [role(r) for r in calls] == ["plan", "tests", *story_calls, *story_calls]
    [story] = result.stories
    assert story.state is StoryState.PASSED
    first, second = story.attempts
    assert first.outcome is AttemptOutcome.CRITERIA_UNMET and first.commit is None
    assert second.outcome is AttemptOutcome.PASSED
    # Sent back to its frozen test, not to before it: the code went on the same test: commit.
    assert first.frozen_commit is not None and second.frozen_commit == first.frozen_commit
    # The finding reached the implementer's second prompt.
    [retry] = [r.prompt() for r in calls if role(r) == "story" and "Attempt: 2" in r.prompt()]
    assert "EVIDENCE-FROM-C: no exclamation mark" in retry
    # The reviewers ran on the runner's cheaper model; the implementer on its default.
    models = {role(r): r.body.get("model", "") for r in calls}
    assert "haiku" in models["describe"] and "haiku" in models["compare"]
    assert "haiku" not in models["story"] and "haiku" not in models["tests"]
    # B and C were offered only tools that read, and Write for their report: no Bash (which
    # runs the change's code), no Edit; the implementer keeps its own.
    tools = {role(r): {t["name"] for t in r.body.get("tools", [])} - CLI_OWN for r in calls}
    assert tools["describe"] == tools["compare"] == set(REVIEW_TOOLS)
    assert "Bash" in tools["story"]
    # B saw the diff, in its own read-only view of the change, and no word of the requirement.
    secret = sentences([REQUIREMENT, TITLE, *CRITERIA])
    for request in calls:
        if role(request) == "describe":
            assert "+def shout(text):" in request.prompt()
            assert first_leak(request.prompt(), secret) is None
            # It worked in its own view of the change, not in the run's worktree.
            view = review_root(project.work_dir, "run-1") / "view"
            assert str(view) in json.dumps(request.body)
    # The review's cost is the run's, beside the implement call's in the record.
    review = second.review
    assert review is not None and review.outcome is ReviewOutcome.CLEAN
    assert review.calls == 2 and review.cost_usd is not None and review.cost_usd > 0
    assert second.cost_usd is not None and review.cost_usd < second.cost_usd
    assert result.ready and result.review == review
    assert project.branch_log() == [f"test: [US-001] - {TITLE}", f"feat: [US-001] - {TITLE}"]


def test_a_story_that_keeps_skipping_a_criterion_ends_needs_review_with_the_finding_in_the_pr(
    make_project: MakeProject, claude_bin: Path
) -> None:
    project = shout_project(make_project, {"maxStoryRetries": 2})
    script = [*plan(project), *write_tests(project)]
    for _ in range(2):
        script += implement(project, UPPER)
        script += describe(project, loud=False)
        script += compare(project, second="not met")
    with fake_anthropic(script) as server:
        result = run_with_claude(project, server, claude_bin)

    [story] = result.stories
    assert story.state is StoryState.NEEDS_REVIEW
    assert [a.outcome for a in story.attempts] == [
        AttemptOutcome.CRITERIA_UNMET,
        AttemptOutcome.NEEDS_REVIEW,
    ]
    assert not result.ready and result.review is None
    body = (project.run_dir() / "pr.md").read_text()
    assert f"{CRITERIA[1]} — not met: EVIDENCE-FROM-C: no exclamation mark" in body
    assert "| 🔎 | US-001 |" in body and "1 of 2 criteria met" in body


def test_malformed_reports_from_the_real_cli_are_retried_once_then_reported(
    make_project: MakeProject, claude_bin: Path
) -> None:
    project = shout_project(make_project)
    broken = [write(handoff(project) / "description.json", "not json"), say("done.")]
    script = [*plan(project), *write_tests(project), *implement(project, LOUD), *broken, *broken]
    with fake_anthropic(script) as server:
        result = run_with_claude(project, server, claude_bin)
        calls = first_requests(server)

    assert [role(r) for r in calls] == ["plan", "tests", "story", "describe", "describe"]
    second_prompt = calls[4].prompt()
    assert "Your previous description was refused" in second_prompt
    [story] = result.stories
    assert story.state is StoryState.NEEDS_REVIEW
    assert "the blind reviewer's description was refused twice" in story.attempts[-1].reason
