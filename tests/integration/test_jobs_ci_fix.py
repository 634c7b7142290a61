"""Red CI on a reqdrive pull request, through the jobs: a CI-fix story judged and pushed, then
green said once; attempts spent said once; a person's push hands the pull request off."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from bot.jobs import runtime
from bot.ops.settings import load_settings
from bot.requests import JobKind, RunRequest
from bot.stores.checkpoints import RedisCheckpointStore
from bot.stores.ci_fixes import CiFixes
from bot.stores.ci_waiting import CiWaiting
from tests.integration.test_jobs import QUEUE, REPO, Scene, progress_comments
from tests.integration.test_pipeline import git, implement, prd, project_factory
from tests.support.github_ci import CiJob, add_workflow_run
from tests.support.github_http import API, FakeGitHub, private_key_pem
from tests.support.github_reviews import add_comment
from worker.model.state import Checkpoint, StoryState

VERSION_TEST = "tests/test_version.py::test_version"  # as pytest names it in CI's log
VERSION_ID = "tests.test_version::test_version"  # as the worker's checks report it
FILES = {
    "version.py": "VERSION = 1\n",
    # Fails on the base already and no story claims it: CI fails on it, and so do the
    # worker's checks (reproduced locally).
    "tests/test_version.py": (
        "import version\n\n\ndef test_version():\n    assert version.VERSION == 2\n"
    ),
}
PYTEST_LOG = (
    "2024-05-01T10:00:02.0000000Z E       assert 1 == 2\n"
    f"2024-05-01T10:00:04.0000000Z FAILED {VERSION_TEST} - assert 1 == 2\n"
    "2024-05-01T10:00:04.0000000Z ##[error]Process completed with exit code 1.\n"
)
FILES_FIXED = {"version.py": "VERSION = 2\n"}
LINT_LOG = "2024-05-01T10:00:02.0000000Z ##[error]ruff: src/feature_1.py:1:1 E999 style\n"


@pytest.fixture
def scene(
    tmp_path: Path, fake_github: FakeGitHub, redis_conn: redis.Redis, redis_url: str
) -> Scene:
    """test_jobs' scene, its repository holding FILES, and `ciFixAttempts: 1`."""
    config = {"agent": {"runner": "command", "timeout": 60}, "ciFixAttempts": 1}
    project = project_factory(tmp_path)(config=config, files=FILES)
    head = git(project.remote, "rev-parse", "main")
    fake_github.add_repo(REPO, str(project.remote))
    fake_github.branch_heads[(REPO, "main")] = head
    text = (tmp_path / "source" / ".github/reqdrive.yml").read_text()
    for ref in ("main", head):
        fake_github.set_file(REPO, ref, ".github/reqdrive.yml", text)
    fake_github.set_role(REPO, "alice", "write")
    settings = load_settings(
        github_webhook_secret="test-secret",
        github_app_id=42,
        github_private_key=private_key_pem(),
        github_api_url=API,
        redis_url=redis_url,
        reqdrive_queue=QUEUE,
        reqdrive_work_dir=project.work_dir,
        reqdrive_agent_command=project.agent_command(tmp_path / "scenario.json"),
        reqdrive_github_request_interval_s=0,
        reqdrive_github_write_interval_s=0,
        reqdrive_sandbox="off",
    )
    sleeps: list[float] = []
    runtime.configure(settings, redis_conn, sleep=sleeps.append)
    return Scene(fake_github, redis_conn, project.remote, tmp_path, project, sleeps)


def built_pull(scene: Scene, stories: dict[str, Any]) -> dict[str, Any]:
    """A one-story requirement run to its pull request; the PR's head as GitHub shows it."""
    issue = scene.gh.add_issue(REPO, "Features", "Build feature one.")
    scene.scenario({"plan": [{"prd": prd(1)}], "stories": stories})
    enqueue(scene, JobKind.RUN, requirement=f"ISSUE-{issue}", issue_number=issue)
    scene.work()
    [pull] = scene.gh.pulls_of(REPO)
    pull["_issue"] = issue
    return sync_head(scene, pull)


def sync_head(scene: Scene, pull: dict[str, Any]) -> dict[str, Any]:
    pull["head"]["sha"] = git(scene.remote, "rev-parse", pull["head"]["ref"])
    return pull


def enqueue(scene: Scene, kind: JobKind, **fields: Any) -> None:
    function = {
        JobKind.RUN: "run_requirement",
        JobKind.CI_FIX: "fix_ci",
        JobKind.HANDOFF: "hand_off",
        JobKind.FEEDBACK: "address_feedback",
    }[kind]
    values = {"delivery_id": f"d-{time.time_ns()}", "repo": REPO, "installation_id": 7}
    request = RunRequest(kind=kind, **{"sender": "alice", **values, **fields})
    scene.queue.enqueue(f"bot.jobs.{function}", kwargs=request.model_dump(mode="json"))


def ci_result(scene: Scene, pull: dict[str, Any], *, log: str, failed: bool = True) -> None:
    """GitHub Actions completed a workflow on the PR's head: the workflow_run job, as intake
    queues it (its sender is whoever pushed: reqdrive's bot)."""
    head, branch = pull["head"]["sha"], pull["head"]["ref"]
    job = CiJob("tests", "failure" if failed else "success", log=log)
    run = add_workflow_run(scene.gh, REPO, head_sha=head, branch=branch, name="CI", jobs=[job])
    enqueue(
        scene,
        JobKind.CI_FIX,
        sender="reqdrive[bot]",
        issue_number=pull["number"],
        branch=branch,
        head_sha=head,
        workflow_run_id=run["id"],
        conclusion=run["conclusion"],
    )
    scene.work()


def pr_comments(scene: Scene, pull: dict[str, Any]) -> list[str]:
    return [c["body"] for c in scene.gh.comments_on(REPO, pull["number"])]


def test_a_failing_workflow_gets_a_ci_fix_commit_and_green_is_said_once(scene: Scene) -> None:
    pull = built_pull(scene, {"US-001": [implement(1)]})
    fix = {"write": {"version.py": "VERSION = 2\n"}}
    scene.scenario({"stories": {"CI-001": [fix]}})
    before = pull["head"]["sha"]

    ci_result(scene, pull, log=PYTEST_LOG)

    head = git(scene.remote, "rev-parse", pull["head"]["ref"])
    assert head != before
    subjects = git(scene.remote, "log", "--format=%s", f"{before}..{head}").splitlines()
    assert subjects == ["feat: [CI-001] - Make the failing CI checks pass: tests"]
    assert scene.project.calls()[-2:] == ["CI-001 1 tests", "CI-001 1"]
    cp = checkpoint(scene, pull)
    story = cp.story("CI-001")
    assert story.state is StoryState.PASSED, story.attempts
    assert story.ci is not None, story
    assert story.ci.candidates == [VERSION_TEST], story.ci
    assert story.ci.reproduced == [VERSION_ID], (story.notes, story.ci)
    assert story.tests == [VERSION_ID]  # reproduced locally: judged fail→pass
    check = next(c for c in story.attempts[-1].tests if c.id == VERSION_ID)
    assert (check.before, check.after) == ("failed", "passed")
    assert "assert 1 == 2" in story.description
    [progress] = progress_comments(scene.gh, pull["_issue"])
    assert "CI-001" in progress["body"] and "CI failed on" in progress["body"]
    [updated] = scene.gh.pulls_of(REPO)
    assert "CI-001" in updated["body"]

    sync_head(scene, pull)
    ci_result(scene, pull, log="all good\n", failed=False)
    ci_result(scene, pull, log="all good\n", failed=False)  # a second workflow: said once

    [green] = [b for b in pr_comments(scene, pull) if "CI is green" in b]
    assert head[:12] in green
    # The run's own check run on the head says it: one "reqdrive" check per commit.
    [said] = reqdrive_checks(scene, head)
    assert said["conclusion"] == "success", said
    assert "green" in said["output"]["summary"] and "CI-001" in said["output"]["summary"]


def test_green_after_a_fix_that_needs_review_keeps_the_runs_verdict(scene: Scene) -> None:
    pull = built_pull(scene, {"US-001": [implement(1)]})
    # A lint failure names no test: the fix cannot be proven here, so it needs review.
    scene.scenario({"stories": {"CI-001": [{"write": {"style.py": "X = 1\n"}}]}})
    ci_result(scene, pull, log=LINT_LOG)
    story = checkpoint(scene, pull).story("CI-001")
    assert story.state is StoryState.NEEDS_REVIEW, story.attempts
    head = sync_head(scene, pull)["head"]["sha"]
    [before] = reqdrive_checks(scene, head)
    assert before["conclusion"] != "success", before

    ci_result(scene, pull, log="all good\n", failed=False)

    # Green CI is said, but it is no verdict on the story: the check run does not turn green.
    [said] = reqdrive_checks(scene, head)
    assert said["conclusion"] == before["conclusion"], said
    summary = said["output"]["summary"]
    assert "CI is green" in summary and "still needs a person" in summary, summary


def reqdrive_checks(scene: Scene, sha: str) -> list[dict[str, Any]]:
    """The check runs named "reqdrive" on `sha`, as the pull request's checks list them."""
    runs = scene.gh.check_runs_of(REPO)
    return [c for c in runs if c.get("head_sha") == sha and c["name"] == "reqdrive"]


def checkpoint(scene: Scene, pull: dict[str, Any]) -> Checkpoint:
    record = scene.records().for_source(REPO, f"ISSUE-{pull['_issue']}")
    assert record is not None
    found = RedisCheckpointStore(scene.conn).load(record.run_id)
    assert found is not None
    return found


def test_ci_failing_again_after_the_last_attempt_stops_and_says_so_once(scene: Scene) -> None:
    pull = built_pull(scene, {"US-001": [implement(1)]})
    restyle = {"write": {"feature_1.py": "def value():\n    return 1  # styled\n"}}
    scene.scenario({"stories": {"CI-001": [restyle]}})

    ci_result(scene, pull, log=LINT_LOG)  # no test named: not reproduced, CI's next result decides
    story = checkpoint(scene, pull).story("CI-001")
    # Pushed and kept, but no test the worker ran showed CI fixed: never "passed".
    assert story.state is StoryState.NEEDS_REVIEW, story.attempts
    assert "no test the worker ran showed the CI failure fixed" in story.attempts[-1].reason
    assert "the next CI result decides" in story.attempts[-1].reason
    assert story.commit is not None and story.commit == git(
        scene.remote, "rev-parse", pull["head"]["ref"]
    )
    assert story.ci is not None and story.ci.reproduced == []
    assert "not reproduced locally: the next CI result judges it" in story.notes
    calls = scene.project.calls()
    assert calls[-2:] == ["CI-001 1 tests", "CI-001 1"]

    sync_head(scene, pull)
    ci_result(scene, pull, log=LINT_LOG)  # ciFixAttempts: 1 is spent
    ci_result(scene, pull, log=LINT_LOG)  # said once

    assert scene.project.calls() == calls  # no agent call more
    [spent] = [b for b in pr_comments(scene, pull) if "handing back" in b]
    assert "CI failed 1 time after reqdrive's fixes: handing back" in spent
    assert "`tests`" in spent
    assert [s.id for s in checkpoint(scene, pull).stories] == ["US-001", "CI-001"]
    head = pull["head"]["sha"]
    # The CI fix's own check run on its head, completed with the word: not a second one.
    [check] = reqdrive_checks(scene, head)
    assert check["conclusion"] == "neutral", check
    summary = check["output"]["summary"]
    assert summary.startswith("🛑 CI failed 1 time after reqdrive's fixes"), summary
    assert "CI-001" in summary.split("---", 1)[1]  # what the run said, kept below
    record = scene.records().for_source(REPO, f"ISSUE-{pull['_issue']}")
    assert record is not None and (record.check_run_id, record.check_sha) == (check["id"], head)


def test_a_persons_push_hands_the_pull_request_off_until_fix_is_asked(scene: Scene) -> None:
    pull = built_pull(scene, {"US-001": [implement(1)]})
    scene.scenario({"stories": {"CI-001": [{"write": {"version.py": "VERSION = 2\n"}}]}})
    head = push_as_alice(scene, pull, {"notes.md": "mine now\n"})
    enqueue(scene, JobKind.HANDOFF, branch=pull["head"]["ref"], head_sha=head)
    scene.work()
    calls = scene.project.calls()

    ci_result(scene, pull, log=PYTEST_LOG)
    ci_result(scene, pull, log=PYTEST_LOG)

    assert scene.project.calls() == calls
    [handed] = [b for b in pr_comments(scene, pull) if "theirs" in b]
    assert "`alice` pushed to this branch" in handed and "/reqdrive fix" in handed
    [check] = reqdrive_checks(scene, head)  # none of the run's on their commit: one made
    assert check["conclusion"] == "neutral" and "theirs" in check["output"]["summary"]
    assert git(scene.remote, "rev-parse", pull["head"]["ref"]) == head  # untouched

    CiFixes(scene.conn).clear(REPO, pull["number"])  # what `/reqdrive fix` does
    ci_result(scene, pull, log=PYTEST_LOG)
    assert scene.project.calls()[len(calls) :] == ["CI-001 1 tests", "CI-001 1"]


def push_as_alice(scene: Scene, pull: dict[str, Any], files: dict[str, str]) -> str:
    """A person's commit on the PR branch, pushed as they would; the branch's head after it."""
    person = scene.tmp / "alice"
    git(scene.tmp, "clone", "-q", "--branch", pull["head"]["ref"], str(scene.remote), str(person))
    for name, text in files.items():
        (person / name).write_text(text)
    git(person, "add", "-A")
    git(person, "-c", "user.name=Alice", "-c", "user.email=a@example.com", "commit", "-qm", "x")
    git(person, "push", "-q", "origin", f"HEAD:{pull['head']['ref']}")
    return str(sync_head(scene, pull)["head"]["sha"])


def test_reqdrive_fix_after_a_persons_push_builds_on_their_commit_and_fixes_ci_again(
    scene: Scene,
) -> None:
    pull = built_pull(scene, {"US-001": [implement(1)]})
    branch, number = pull["head"]["ref"], pull["number"]
    theirs = push_as_alice(scene, pull, {"x.py": "def x():\n    return 7\n"})
    enqueue(scene, JobKind.HANDOFF, branch=branch, head_sha=theirs)
    scene.work()
    calls = scene.project.calls()
    ci_result(scene, pull, log=PYTEST_LOG)  # handed off: CI failing starts nothing
    assert scene.project.calls() == calls
    assert CiFixes(scene.conn).handed_off(REPO, number) == "alice"

    # The rename: y.py and its test replace x.py (a commit per phase, tests first).
    rename = {
        "write": {
            "y.py": "def y():\n    return 7\n",
            "tests/test_y.py": "import y\n\n\ndef test_y():\n    assert y.y() == 7\n",
        },
        "delete": ["x.py"],
    }
    scene.scenario({"stories": {"FB-001": [rename], "CI-001": [{"write": FILES_FIXED}]}})
    asked = add_comment(scene.gh, REPO, number, "alice", "/reqdrive fix please rename x")
    enqueue(scene, JobKind.FEEDBACK, issue_number=number, comment_id=asked)
    scene.work()

    assert CiFixes(scene.conn).handed_off(REPO, number) is None  # the hand-off is lifted
    assert scene.project.calls()[len(calls) :] == ["FB-001 1 tests", "FB-001 1"]
    story = checkpoint(scene, pull).story("FB-001")
    assert story.state is StoryState.PASSED, (story.notes, story.attempts)
    head = git(scene.remote, "rev-parse", branch)
    # On top of the person's commit, which stays in the branch's history.
    assert git(scene.remote, "log", "--format=%s", f"{theirs}..{head}").splitlines() == [
        "feat: [FB-001] - Answer the fix asked by alice",
        "test: [FB-001] - Answer the fix asked by alice",
    ]
    files = git(scene.remote, "ls-tree", "-r", "--name-only", head).splitlines()
    assert "y.py" in files and "x.py" not in files
    assert "FB-001" in scene.gh.pulls_of(REPO)[0]["body"]
    # Answered on the PR (a fix comment has no thread): the verdict and both commits.
    [answer] = [b for b in pr_comments(scene, pull) if "**`FB-001` passed**" in b]
    feat, test = git(scene.remote, "log", "--format=%H", f"{theirs}..{head}").splitlines()
    assert f"tests {test[:12]}, change {feat[:12]}" in answer
    assert "thread" not in answer  # nothing to resolve

    sync_head(scene, pull)
    before = scene.project.calls()
    ci_result(scene, pull, log=PYTEST_LOG)  # reqdrive's again: a CI fix starts
    assert scene.project.calls()[len(before) :] == ["CI-001 1 tests", "CI-001 1"]
    assert checkpoint(scene, pull).story("CI-001").state is StoryState.PASSED


def test_green_without_a_fix_or_on_an_old_head_says_nothing(scene: Scene) -> None:
    pull = built_pull(scene, {"US-001": [implement(1)]})
    ci_result(scene, pull, log="ok\n", failed=False)
    stale = {**pull, "head": {**pull["head"], "sha": "1" * 40}}
    ci_result(scene, stale, log=PYTEST_LOG)
    assert not [b for b in pr_comments(scene, pull) if "CI" in b]
    assert [s.id for s in checkpoint(scene, pull).stories] == ["US-001"]


def test_ci_results_while_a_run_goes_wait_and_the_head_it_ends_on_decides(
    scene: Scene, caplog: pytest.LogCaptureFixture
) -> None:
    pull = built_pull(scene, {"US-001": [implement(1)]})
    scene.scenario({"stories": {"CI-001": [{"write": FILES_FIXED}]}})
    record = scene.records().for_source(REPO, f"ISSUE-{pull['_issue']}")
    assert record is not None
    run_id = record.run_id
    scene.records().beat(run_id)  # a run of this pull request is going on some worker
    calls = scene.project.calls()

    with caplog.at_level(logging.INFO, logger="bot.jobs.ci_fix"):
        ci_result(scene, pull, log=PYTEST_LOG)  # on the head as the run started
        # The run pushes a commit (as a story would), and CI fails on it too.
        head = push_as_alice(scene, pull, {"notes.md": "the run's commit\n"})
        cp = checkpoint(scene, pull)
        cp.head_sha = cp.pushed_sha = head
        RedisCheckpointStore(scene.conn).save(cp)
        ci_result(scene, pull, log=PYTEST_LOG)

    assert scene.project.calls() == calls  # nothing ran beside the run, nothing was said
    assert not [b for b in pr_comments(scene, pull) if "CI" in b]
    said = [r.getMessage() for r in caplog.records]
    assert said.count("ci result waits for the run") == 2
    assert "ci result superseded: a newer head's waits" in said  # the older head's, dropped
    waiting = CiWaiting(scene.conn).take(run_id)
    assert len(waiting) == 1 and head in waiting[0]
    CiWaiting(scene.conn).put(run_id, head, success=False, request_json=waiting[0])

    scene.records().ended(run_id)  # the run ends on `head`: `/reqdrive run` on the PR for it
    enqueue(scene, JobKind.RUN, issue_number=pull["number"], comment_id=5)
    scene.work()  # the run, then the CI result it queued: a fix of the head it ended on

    assert scene.project.calls()[len(calls) :] == ["CI-001 1 tests", "CI-001 1"]
    assert CiFixes(scene.conn).attempts(REPO, pull["number"]) == 1
    fixed = git(scene.remote, "rev-parse", pull["head"]["ref"])
    assert git(scene.remote, "rev-parse", f"{fixed}~1") == head  # on top of the run's head
    assert CiWaiting(scene.conn).take(run_id) == []


def test_a_ci_fix_whose_run_stops_at_its_workspace_counts_no_attempt(scene: Scene) -> None:
    pull = built_pull(scene, {"US-001": [implement(1)]})
    scene.scenario({"stories": {"CI-001": [{"write": FILES_FIXED}]}})
    records, number = scene.records(), pull["number"]
    record = records.for_source(REPO, f"ISSUE-{pull['_issue']}")
    assert record is not None
    remote, record.clone_url = record.clone_url, str(scene.tmp / "moved.git")
    records.save(record)  # the clone fails: the run stops at its workspace step
    calls = scene.project.calls()

    ci_result(scene, pull, log=PYTEST_LOG)

    assert scene.project.calls() == calls  # the agent was never called
    assert CiFixes(scene.conn).attempts(REPO, number) == 0  # ciFixAttempts: 1 is not used up
    [said] = [b for b in pr_comments(scene, pull) if "could not start" in b]
    assert "CI-001" in said and "at its workspace step" in said and "moved.git" in said
    assert "not counted as one of the `ciFixAttempts` (0 used)" in said
    assert [s.id for s in checkpoint(scene, pull).stories] == ["US-001"]  # taken back

    fixed = records.load(record.run_id)
    assert fixed is not None
    fixed.clone_url = remote
    records.save(fixed)
    ci_result(scene, pull, log=PYTEST_LOG)  # CI run again on the same head, failing again

    assert scene.project.calls()[len(calls) :] == ["CI-001 1 tests", "CI-001 1"]
    assert CiFixes(scene.conn).attempts(REPO, number) == 1
    assert [s.id for s in checkpoint(scene, pull).stories] == ["US-001", "CI-001"]
    assert checkpoint(scene, pull).story("CI-001").state is StoryState.PASSED
    assert not [b for b in pr_comments(scene, pull) if "handing back" in b]
