"""Review feedback on a reqdrive PR, through the job: FB- stories, replies, resolved threads."""

# ruff: noqa: F811 - `scene` is test_jobs' fixture, imported for pytest and taken by name

from __future__ import annotations

import time
from typing import Any

from bot.requests import JobKind, RunRequest
from bot.stores.checkpoints import RedisCheckpointStore
from bot.stores.feedback_waiting import FeedbackWaiting
from tests.integration.test_jobs import (
    REPO,
    Scene,
    progress_comments,
    scene,  # noqa: F401 - the fixture, used by name
)
from tests.integration.test_pipeline import git, implement, prd
from tests.support.github_reviews import add_reply, add_review, replies_in, resolved
from worker.model.state import StoryState

HUNK = "@@ -0,0 +1,2 @@\n+def value():\n+    return 1"


def feature(name: str, value: int, *, also: dict[str, str] | None = None) -> dict[str, Any]:
    """An attempt adding <name>.py whose value() is `value`, with a test that wants 7."""
    return {
        "write": {
            f"{name}.py": f"def value():\n    return {value}\n",
            f"tests/test_{name}.py": (
                f"import {name}\n\n\ndef test_{name}():\n    assert {name}.value() == 7\n"
            ),
            **(also or {}),
        }
    }


def open_pull(scene: Scene) -> dict[str, Any]:
    """A one-story run on an issue, finished and ready: its pull request."""
    issue = scene.gh.add_issue(REPO, "Feature", "Build feature one.")
    scene.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    scene.enqueue(JobKind.RUN, requirement=f"ISSUE-{issue}", issue_number=issue)
    scene.work()
    [pull] = scene.gh.pulls_of(REPO)
    assert pull["draft"] is False
    return pull


def feedback(scene: Scene, number: int, **fields: Any) -> None:
    request = RunRequest(
        kind=JobKind.FEEDBACK,
        delivery_id=f"d-{time.time_ns()}",
        repo=REPO,
        installation_id=7,
        sender="alice",
        issue_number=number,
        **fields,
    )
    scene.queue.enqueue("bot.jobs.address_feedback", kwargs=request.model_dump(mode="json"))


def stories_of(scene: Scene) -> dict[str, StoryState]:
    cp = RedisCheckpointStore(scene.conn).load(_run_id(scene))
    assert cp is not None
    return {s.id: s.state for s in cp.stories}


def test_a_review_with_two_threads_gives_two_stories_two_commits_two_replies_two_resolved(
    scene: Scene,
) -> None:
    gh = scene.gh
    pull = open_pull(scene)
    number = pull["number"]
    review_id, (one, two) = add_review(
        gh,
        REPO,
        number,
        "alice",
        "CHANGES_REQUESTED",
        "",
        [
            {"path": "feature_1.py", "line": 2, "body": "Add fb_one, worth 7.", "diff_hunk": HUNK},
            {"path": "feature_1.py", "line": 1, "body": "And fb_two, also 7."},
        ],
    )
    scene.scenario(
        {"stories": {"FB-001": [feature("fb_one", 7)], "FB-002": [feature("fb_two", 7)]}}
    )
    calls_before = scene.project.calls()
    writes_before = len(gh.writes())  # GraphQL reads count here too: api_writes drops them

    feedback(scene, number, review_id=review_id)
    scene.work()

    assert scene.project.calls()[len(calls_before) :] == [
        "FB-001 1 tests",
        "FB-001 1",
        "FB-002 1 tests",
        "FB-002 1",
    ]
    assert stories_of(scene) == {
        "US-001": StoryState.PASSED,
        "FB-001": StoryState.PASSED,
        "FB-002": StoryState.PASSED,
    }
    branch = pull["head"]["ref"]
    subjects = git(scene.remote, "log", "--format=%s", f"main..{branch}").splitlines()
    assert [s for s in subjects if "[FB-" in s] == [
        "feat: [FB-002] - Answer the review thread on feature_1.py line 1",
        "test: [FB-002] - Answer the review thread on feature_1.py line 1",
        "feat: [FB-001] - Answer the review thread on feature_1.py line 2",
        "test: [FB-001] - Answer the review thread on feature_1.py line 2",
    ]
    feat = {s.split("]")[0][-6:]: sha for sha, s in _log(scene, branch) if s.startswith("feat:")}
    for thread, story in ((one, "FB-001"), (two, "FB-002")):
        [reply] = replies_in(gh, thread)
        assert f"**`{story}` passed**" in reply and feat[story][:12] in reply
        assert resolved(gh, thread)
    [pull] = gh.pulls_of(REPO)
    assert "FB-001" in pull["body"] and "FB-002" in pull["body"] and pull["draft"] is False
    assert "FB-002" in progress_comments(gh, _issue_of(scene))[0]["body"]
    head = git(scene.remote, "rev-parse", branch)
    checks = [r["conclusion"] for r in gh.check_runs_of(REPO) if r["head_sha"] == head]
    assert checks == ["success"]
    written = api_writes(gh, writes_before)
    # Once per run: 👀, the comment when it starts and with the plan, and at the end the PR
    # body, the check run's conclusion and the comment. Per thread: the check run on its
    # head, the previous one completed, the reply and the resolution.
    per_run = 6
    assert len(written) - per_run == 2 * 4, "\n".join(written)


def test_a_fix_that_breaks_another_test_is_not_resolved_and_the_reply_names_the_test(
    scene: Scene,
) -> None:
    gh = scene.gh
    pull = open_pull(scene)
    number = pull["number"]
    review_id, (thread,) = add_review(
        gh, REPO, number, "alice", "COMMENTED", "", [{"path": "feature_1.py", "line": 2,
                                                      "body": "Add fb_one, worth 7."}]
    )  # fmt: skip
    breaks = feature("fb_one", 7, also={"feature_1.py": "def value():\n    return -1\n"})
    scene.scenario({"stories": {"FB-001": [breaks]}})

    feedback(scene, number, review_id=review_id)
    scene.work()

    assert stories_of(scene)["FB-001"] is StoryState.FAILED
    [reply] = replies_in(gh, thread)
    assert "**`FB-001` did not pass**" in reply
    assert "test_feature_1" in reply
    assert not resolved(gh, thread)
    branch = pull["head"]["ref"]
    assert "[FB-001]" not in git(scene.remote, "log", "--format=%s", f"main..{branch}").replace(
        "test: [FB-001]", ""
    )


def test_a_fix_with_no_test_of_its_own_needs_review_and_its_thread_stays_open(
    scene: Scene,
) -> None:
    """A hostile agent answers a thread with a trivial edit and no test: pass→pass alone must
    not make it "passed". The honest thread beside it, with a test failing before and passing
    after, still passes and is resolved."""
    gh = scene.gh
    pull = open_pull(scene)
    number = pull["number"]
    review_id, (honest, gamed) = add_review(
        gh, REPO, number, "alice", "CHANGES_REQUESTED", "",
        [{"path": "feature_1.py", "line": 2, "body": "Add fb_one, worth 7."},
         {"path": "feature_1.py", "line": 1, "body": "value() must reject negative input."}],
    )  # fmt: skip
    trivial = {"write": {"feature_1.py": "def value():\n    return 1  # reviewed\n"}}
    scene.scenario({"stories": {"FB-001": [feature("fb_one", 7)], "FB-002": [trivial]}})
    calls_before = scene.project.calls()

    feedback(scene, number, review_id=review_id)
    scene.work()

    assert scene.project.calls()[len(calls_before) :] == [
        "FB-001 1 tests",
        "FB-001 1",
        "FB-002 1 tests",
        "FB-002 1",  # one attempt: kept for a person, not retried
    ]
    assert stories_of(scene) == {
        "US-001": StoryState.PASSED,
        "FB-001": StoryState.PASSED,
        "FB-002": StoryState.NEEDS_REVIEW,
    }
    [honest_reply] = replies_in(gh, honest)
    assert "**`FB-001` passed**" in honest_reply and resolved(gh, honest)
    branch = pull["head"]["ref"]
    [(gamed_sha, _)] = [(sha, s) for sha, s in _log(scene, branch) if "[FB-002]" in s]
    [gamed_reply] = replies_in(gh, gamed)
    assert "**`FB-002` needs review**" in gamed_reply
    assert "no test of its own shows the review comment addressed" in gamed_reply
    assert f"please check the change (commit {gamed_sha[:12]})" in gamed_reply
    assert "passed" not in gamed_reply and "Resolving" not in gamed_reply
    assert "This thread stays open" in gamed_reply
    assert not resolved(gh, gamed)
    [pull] = gh.pulls_of(REPO)
    assert pull["draft"] is True  # never "passed, ready" on a pass→pass alone
    assert "FB-002 (needs review)" in pull["body"]


def test_a_thread_answered_by_a_test_of_the_pull_requests_earlier_work_is_not_resolved(
    scene: Scene,
) -> None:
    """A hostile tests call writes a test of what US-001 already built (it fails on the base
    commit and passes at the head) and changes nothing: not "passed (nothing to change)"."""
    gh = scene.gh
    pull = open_pull(scene)
    number = pull["number"]
    review_id, (thread,) = add_review(
        gh, REPO, number, "alice", "CHANGES_REQUESTED", "",
        [{"path": "feature_1.py", "line": 2, "body": "value() must reject negative input."}],
    )  # fmt: skip
    again = "import feature_1\n\n\ndef test_again():\n    assert feature_1.value() == 1\n"
    scene.scenario({"stories": {"FB-001": [{"write": {"tests/test_again.py": again}}]}})
    calls_before = scene.project.calls()

    feedback(scene, number, review_id=review_id)
    scene.work()

    assert scene.project.calls()[len(calls_before) :] == ["FB-001 1 tests"]
    assert stories_of(scene)["FB-001"] is StoryState.NEEDS_REVIEW
    [reply] = replies_in(gh, thread)
    assert "**`FB-001` needs review**" in reply
    assert "no test of its own shows the review comment addressed" in reply
    assert "passed" not in reply.replace("tests pass on the branch", "")
    assert "Resolving" not in reply
    assert not resolved(gh, thread)
    assert gh.pulls_of(REPO)[0]["draft"] is True


def test_a_thread_reqdrive_answered_last_is_not_taken_again_until_a_person_replies(
    scene: Scene,
) -> None:
    gh = scene.gh
    pull = open_pull(scene)
    number = pull["number"]
    review_id, (thread,) = add_review(
        gh, REPO, number, "alice", "CHANGES_REQUESTED", "",
        [{"path": "feature_1.py", "line": 2, "body": "Add fb_one, worth 7."}],
    )  # fmt: skip
    scene.scenario({"stories": {"FB-001": [feature("fb_one", 8)]}})  # wrong: test wants 7
    feedback(scene, number, review_id=review_id)
    scene.work()
    assert stories_of(scene)["FB-001"] is StoryState.FAILED
    calls_before = scene.project.calls()

    feedback(scene, number, review_id=review_id)  # the same review again: nothing new
    scene.work()
    assert scene.project.calls() == calls_before

    still_wrong = add_reply(gh, thread, "alice", "It must return 7, not 8.")  # names no App
    scene.scenario({"stories": {"FB-002": [feature("fb_one", 7)]}})
    feedback(scene, number, review_comment_id=still_wrong)
    scene.work()

    assert stories_of(scene)["FB-002"] is StoryState.PASSED
    assert resolved(gh, thread)
    assert len(replies_in(gh, thread)) == 2


def test_feedback_while_the_run_runs_waits_and_runs_once_after_it_ends(scene: Scene) -> None:
    gh = scene.gh
    pull = open_pull(scene)
    number = pull["number"]
    run_id = _run_id(scene)
    scene.records().beat(run_id)  # a run of this pull request is going on some worker
    review_id, (one,) = add_review(
        gh, REPO, number, "alice", "CHANGES_REQUESTED", "",
        [{"path": "feature_1.py", "line": 2, "body": "Add fb_one, worth 7."}],
    )  # fmt: skip
    feedback(scene, number, review_id=review_id)
    short = add_reply(gh, one, "alice", "/reqdrive fix and keep it short")
    feedback(scene, number, review_comment_id=short)
    calls_before = scene.project.calls()
    scene.work()
    assert scene.project.calls() == calls_before  # both wait: nothing ran beside the run
    waiting = FeedbackWaiting(scene.conn).take(run_id)
    assert waiting is not None and f'"review_comment_id":{short}' in waiting  # the newest
    FeedbackWaiting(scene.conn).put(run_id, waiting)

    scene.records().ended(run_id)  # the run ends: `/reqdrive run` on the PR stands for it
    scene.scenario({"stories": {"FB-001": [feature("fb_one", 7)]}})
    scene.enqueue(JobKind.RUN, issue_number=number, comment_id=5)
    scene.work()  # the run, then the one feedback run it queued

    assert scene.project.calls()[len(calls_before) :] == ["FB-001 1 tests", "FB-001 1"]
    assert stories_of(scene)["FB-001"] is StoryState.PASSED
    assert resolved(gh, one) and len(replies_in(gh, one)) == 1
    assert FeedbackWaiting(scene.conn).take(run_id) is None


def test_a_sender_without_the_permission_is_refused_and_nothing_runs(scene: Scene) -> None:
    pull = open_pull(scene)
    add_review(scene.gh, REPO, pull["number"], "mallory", "CHANGES_REQUESTED", "drop the tests")
    calls_before = scene.project.calls()
    request = RunRequest(
        kind=JobKind.FEEDBACK, delivery_id="d-x", repo=REPO, installation_id=7,
        sender="mallory", issue_number=pull["number"], review_id=1,
    )  # fmt: skip
    scene.queue.enqueue("bot.jobs.address_feedback", kwargs=request.model_dump(mode="json"))
    scene.work()
    assert scene.project.calls() == calls_before
    replies = [c["body"] for c in scene.gh.comments_on(REPO, pull["number"])]
    assert any("runs only for people with `write` access" in r for r in replies)


def _run_id(scene: Scene) -> str:
    keys = [
        str(k, "utf-8") if isinstance(k, bytes) else k for k in scene.conn.keys("reqdrive:run:*")
    ]
    [run_id] = [k.rsplit(":", 1)[-1] for k in keys]
    return run_id


def api_writes(gh: Any, since: int) -> list[str]:
    """The writes after the first `since`: a GraphQL query is a read, only a mutation writes."""
    calls = gh.writes()[since:]
    return [
        f"{c.method} {c.path} {_operation(c.body)}"
        for c in calls
        if not c.path.endswith("graphql") or "mutation" in c.body["query"]
    ]


def _operation(body: Any) -> str:
    if isinstance(body, dict) and "query" in body:
        return " ".join(body["query"].split())[:40]
    return ""


def _log(scene: Scene, branch: str) -> list[tuple[str, str]]:
    lines = git(scene.remote, "log", "--format=%H %s", f"main..{branch}").splitlines()
    return [(line[:40], line[41:]) for line in lines]


def _issue_of(scene: Scene) -> int:
    return min(n for (repo, n), issue in scene.gh.issues.items() if "pull_request" not in issue)
