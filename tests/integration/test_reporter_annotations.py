"""The check run shows failed tests on their lines; agent-written text never acts on GitHub."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from bot.github.annotations import MAX_ANNOTATIONS
from bot.github.auth import RUN_PERMISSIONS, AppAuth
from bot.github.client import ClientSettings, GitHubApp
from bot.github.reporter import GitHubReporter
from bot.stores.checkpoints import RedisCheckpointStore
from bot.stores.runs import RunRecord, RunRecords
from tests.support.github_http import API, FakeGitHub, private_key_pem
from worker.model.gates import FailureSite, GateResult, TestStatus
from worker.model.state import (
    AttemptOutcome,
    AttemptRecord,
    RunResult,
    StopReason,
    StoryRecord,
    StoryState,
)
from worker.report.inert_text import ZWJ

REPO = "octo/demo"
BASE, HEAD = "a" * 40, "b" * 40
HOSTILE = "@octocat Closes #2"  # issue 1 is the one the run may close


@pytest.fixture
def gh(fake_github: FakeGitHub) -> FakeGitHub:
    fake_github.add_repo(REPO, "file:///nowhere.git")
    fake_github.add_issue(REPO, "Add a greeting", "Say hello")
    return fake_github


def reporter(redis_conn: redis.Redis) -> GitHubReporter:
    auth = AppAuth(42, private_key_pem(), base_url=API)
    settings = ClientSettings(base_url=API, seconds_between_requests=0, seconds_between_writes=0)
    client = GitHubApp(auth, settings, sleep=lambda s: None).client(7, REPO, RUN_PERMISSIONS)
    record = RunRecord(
        run_id="run-1", repo=REPO, installation_id=7, source="ISSUE-1", text="Say hello",
        slug="issue-1", branch="reqdrive/issue-1", base_branch="main", clone_url="x",
        issue_number=1, comment_target=1,
    )  # fmt: skip
    return GitHubReporter(
        client, record, RunRecords(redis_conn), checkpoints=RedisCheckpointStore(redis_conn)
    )


def failing_gate(count: int, *, located: bool = True, prefix: str = "t") -> GateResult:
    ids = [f"tests.test_{prefix}::test_{n}" for n in range(count)]
    return GateResult(
        name="tests", command="pytest", passed=False, exit_code=1, timed_out=False,
        duration_s=1.0, tests=dict.fromkeys(ids, TestStatus.FAILED),
        failure_sites={
            t: FailureSite(path=f"tests/test_{prefix}.py", line=n + 1, message=f"assert {n}")
            for n, t in enumerate(ids)
        } if located else {},
    )  # fmt: skip


def story(title: str, state: StoryState, gates: list[GateResult], reason: str = "") -> StoryRecord:
    attempt = AttemptRecord(iteration=1, attempt=1, outcome=AttemptOutcome.GATES_FAILED,
                            reason=reason, gates=gates)  # fmt: skip
    return StoryRecord(id="US-001", title=title, priority=1, acceptance_criteria=["works"],
                       state=state, attempts=[attempt])  # fmt: skip


def result(stories: list[StoryRecord], final: list[GateResult]) -> RunResult:
    return RunResult(
        run_id="run-1", requirement_source="ISSUE-1", project="Demo", branch="reqdrive/issue-1",
        base_ref="main", base_sha=BASE, head_sha=HEAD, stories=stories, final_gates=final,
        baseline_gates=[], ready=False, draft_reason="1 of 1 stories did not pass: US-001",
        stop_reason=StopReason.STORIES_SETTLED,
    )  # fmt: skip


def check_bodies(gh: FakeGitHub) -> list[dict[str, Any]]:
    return [c.body for c in gh.calls if "/check-runs" in c.path and c.method != "GET"]


def test_a_failing_attempt_annotates_the_open_check_run_once_per_place(
    gh: FakeGitHub, redis_conn: redis.Redis
) -> None:
    rep = reporter(redis_conn)
    rep.branch_pushed("reqdrive/issue-1", HEAD)  # a first story passed: a check run is open
    failing = story("Feature", StoryState.PENDING, [failing_gate(2)])

    rep.story_finished(failing, failing.attempts[0])
    rep.story_finished(failing, failing.attempts[0])  # the same failures again: nothing new

    [check] = gh.check_runs_of(REPO)
    assert check["status"] == "in_progress"
    assert check["_annotations"] == [
        {"path": "tests/test_t.py", "start_line": 1, "end_line": 1,
         "annotation_level": "failure", "title": "tests.test_t::test_0", "message": "assert 0"},
        {"path": "tests/test_t.py", "start_line": 2, "end_line": 2,
         "annotation_level": "failure", "title": "tests.test_t::test_1", "message": "assert 1"},
    ]  # fmt: skip
    assert [len(b["output"].get("annotations", [])) for b in check_bodies(gh)] == [0, 2]
    # The run's record keeps what was sent: a worker resuming the run does not send it again.
    saved = RunRecords(redis_conn).load("run-1")
    assert saved is not None and len(saved.annotated) == 2


def test_the_completed_check_run_shows_the_final_failures_capped_with_a_note(
    gh: FakeGitHub, redis_conn: redis.Redis
) -> None:
    rep = reporter(redis_conn)
    rep.branch_pushed("reqdrive/issue-1", HEAD)
    # 60 final failures with a line, one story failure already annotated, one without a line.
    earlier = story("Feature", StoryState.FAILED, [failing_gate(1, prefix="story")])
    rep.story_finished(earlier, earlier.attempts[0])
    unlocated = failing_gate(1, located=False, prefix="nowhere")

    rep.run_finished(result([earlier], [failing_gate(60), unlocated]))

    [check] = gh.check_runs_of(REPO)
    assert (check["status"], check["conclusion"]) == ("completed", "failure")
    annotations = check["_annotations"]
    assert len(annotations) == MAX_ANNOTATIONS  # one request's worth per check run, no repeat
    assert annotations[0]["title"] == "tests.test_story::test_0"
    assert len({(a["path"], a["start_line"]) for a in annotations}) == MAX_ANNOTATIONS
    last = check_bodies(gh)[-1]
    assert len(last["output"]["annotations"]) == MAX_ANNOTATIONS - 1
    assert "11 more failing tests with a known line not annotated" in last["output"]["summary"]
    assert all(a["path"] != "tests/test_nowhere.py" for a in annotations)


def test_a_run_failing_later_annotates_a_new_check_run_on_the_base(
    gh: FakeGitHub, redis_conn: redis.Redis
) -> None:
    rep = reporter(redis_conn)
    failed = story("Feature", StoryState.FAILED, [failing_gate(1)])
    rep.plan_ready([failed])
    assert "📋 Plan: 1 story\n" in gh.comments_on(REPO, 1)[-1]["body"]
    rep.story_finished(failed, failed.attempts[0])  # no check run yet: nothing to annotate
    assert gh.check_runs_of(REPO) == []

    rep.fallback_sha = lambda: BASE
    rep.run_failed("implement", "the agent stopped")

    [check] = gh.check_runs_of(REPO)
    assert check["head_sha"] == BASE and check["conclusion"] == "failure"
    assert [a["title"] for a in check["_annotations"]] == ["tests.test_t::test_0"]


def test_agent_written_text_neither_mentions_nor_closes_anywhere_it_is_shown(
    gh: FakeGitHub, redis_conn: redis.Redis
) -> None:
    rep = reporter(redis_conn)
    gate = failing_gate(1)
    test_id = f"tests.test_t::test_x[{HOSTILE}]"
    gate = gate.model_copy(update={
        "tests": {test_id: TestStatus.FAILED},
        "failure_sites": {test_id: FailureSite(path="tests/t.py", line=3,
                                               message=f"{HOSTILE} {'x' * 480}")},
    })  # fmt: skip
    hostile = story(f"Greet {HOSTILE}", StoryState.FAILED, [gate], reason=f"fixes #2 {HOSTILE}")
    hostile = hostile.model_copy(update={"id": "US-@octocat"})
    rep.plan_ready([hostile])
    rep.story_started(hostile, 1, 1)
    rep.fallback_sha = lambda: BASE
    finished = result([hostile], [])
    hostile_texts = {"draft_reason": f"because {HOSTILE}", "project": f"Demo {HOSTILE}"}
    rep.run_finished(finished.model_copy(update=hostile_texts))

    texts = [c["body"] for c in gh.comments_on(REPO, 1)]
    [check] = gh.check_runs_of(REPO)
    texts += [check["output"]["title"], check["output"]["summary"]]
    texts += [f"{a['title']} {a['message']}" for a in check["_annotations"]]
    texts += [str(c.body) for c in gh.calls if c.method != "GET"]  # every request sent
    for text in texts:
        assert "@octocat" not in text and "Closes #2" not in text, text
        assert "fixes #2" not in text, text
    assert f"@{ZWJ}octocat" in check["output"]["summary"]
    [pull] = gh.pulls_of(REPO)
    assert pull["title"] == f"reqdrive: Demo @{ZWJ}octocat C{ZWJ}loses #2"
    [annotation] = check["_annotations"]
    # 499 characters, 501 once the two words are made inert: cut to GitHub-friendly 500.
    assert len(annotation["message"]) == 500 and annotation["message"].endswith("x…")
    assert f"@{ZWJ}octocat" in annotation["title"]
