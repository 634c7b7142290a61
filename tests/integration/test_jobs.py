"""The RQ jobs end to end: a job → GitHub (stood in by responses) and a real git remote."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Queue, Retry, SimpleWorker
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from rq.timeouts import JobTimeoutException

from bot.jobs import run_requirement, runtime, scan_push
from bot.jobs.job_class import ReqdriveJob
from bot.ops.settings import load_settings
from bot.requests import JobKind, RunRequest
from bot.stores.checkpoints import RedisCheckpointStore
from bot.stores.deliveries import rerun_key
from bot.stores.runs import RunRecord, RunRecords
from bot.web.asgi import create_asgi_app
from bot.web.enqueue import Enqueuer, job_id_for
from tests.integration.test_pipeline import git, implement, prd, project_factory
from tests.support import webhooks
from tests.support.asgi_client import AsgiClient
from tests.support.github_http import API, FakeGitHub, private_key_pem
from worker.model.state import StoryState
from worker.run.pipeline import Pipeline

REPO = "octo/demo"
QUEUE = "reqdrive-test"


@dataclass
class Scene:
    """A repository on a bare remote, GitHub faked around it, and a worker runtime."""

    gh: FakeGitHub
    conn: redis.Redis
    remote: Path
    tmp: Path
    project: Any
    sleeps: list[float]

    @property
    def queue(self) -> Queue:
        return Queue(QUEUE, connection=self.conn, serializer=JSONSerializer)

    def scenario(self, data: dict[str, Any]) -> None:
        self.project.scenario(data)

    def enqueue(self, kind: JobKind, **fields: Any) -> str:
        function = {
            JobKind.RUN: "run_requirement",
            JobKind.RETRY: "retry_stories",
            JobKind.PLAN: "plan_requirement",
            JobKind.CANCEL: "cancel_run",
            JobKind.STATUS: "report_status",
            JobKind.HELP: "reply_help",
            JobKind.CLOSE: "close_run",
            JobKind.UNINSTALL: "drop_installation",
        }[kind]
        values: dict[str, Any] = {
            "delivery_id": f"d-{time.time_ns()}",
            "repo": REPO,
            "installation_id": 7,
            "sender": "alice",
            **fields,
        }
        request = RunRequest(kind=kind, **values)
        job = self.queue.enqueue(f"bot.jobs.{function}", kwargs=request.model_dump(mode="json"))
        return str(job.id)

    def work(self) -> None:
        worker = SimpleWorker([self.queue], connection=self.conn, serializer=JSONSerializer)
        worker.work(burst=True)

    def records(self) -> RunRecords:
        return RunRecords(self.conn)


@pytest.fixture
def scene(
    tmp_path: Path, fake_github: FakeGitHub, redis_conn: redis.Redis, redis_url: str
) -> Scene:
    config = {"agent": {"runner": "command", "timeout": 60}}
    project = project_factory(tmp_path)(config=config)
    head = git(project.remote, "rev-parse", "main")
    source = tmp_path / "source"
    fake_github.add_repo(REPO, str(project.remote))
    fake_github.branch_heads[(REPO, "main")] = head
    for ref in ("main", head):
        fake_github.set_file(
            REPO, ref, ".github/reqdrive.yml", (source / ".github/reqdrive.yml").read_text()
        )
    fake_github.set_role(REPO, "alice", "write")
    scenario = tmp_path / "scenario.json"
    settings = load_settings(
        github_webhook_secret="test-secret",
        github_app_id=42,
        github_private_key=private_key_pem(),
        github_api_url=API,
        redis_url=redis_url,
        reqdrive_queue=QUEUE,
        reqdrive_work_dir=project.work_dir,
        reqdrive_agent_command=project.agent_command(scenario),
        reqdrive_github_request_interval_s=0,
        reqdrive_github_write_interval_s=0,
        # The scripted agent reads its scenario beside the work dir, which a sandbox hides;
        # tests/integration/test_pipeline_sandbox.py runs whole runs in the sandbox.
        reqdrive_sandbox="off",
    )
    sleeps: list[float] = []
    runtime.configure(settings, redis_conn, sleep=sleeps.append)
    return Scene(fake_github, redis_conn, project.remote, tmp_path, project, sleeps)


def three_stories() -> dict[str, Any]:
    return {
        "plan": [{"prd": prd(3)}],
        "stories": {f"US-00{n}": [implement(n)] for n in (1, 2, 3)},
    }


def progress_comments(gh: FakeGitHub, number: int) -> list[dict[str, Any]]:
    return [c for c in gh.comments_on(REPO, number) if "reqdrive:progress" in c["body"]]


def test_label_reacts_comments_in_place_opens_a_draft_then_marks_it_ready(scene: Scene) -> None:
    gh = scene.gh
    issue = gh.add_issue(REPO, "Features", "Build features one to three.")
    scene.scenario(three_stories())

    scene.enqueue(JobKind.RUN, requirement=f"ISSUE-{issue}", issue_number=issue)
    scene.work()

    assert gh.reactions[0] == {"issue": issue, "content": "eyes"}
    assert gh.writes()[0].path.endswith(f"/issues/{issue}/reactions")  # 👀 before anything else
    [comment] = progress_comments(gh, issue)
    edits = [c for c in gh.calls if c.method == "PATCH" and c.path.endswith(f"/{comment['id']}")]
    assert len(edits) >= 4  # one comment, edited in place as the run goes
    assert "✅ Done" in comment["body"] and "US-003" in comment["body"]
    [pull] = gh.pulls_of(REPO)
    opened = next(c for c in gh.calls if c.method == "POST" and c.path.endswith("/pulls"))
    assert opened.body["draft"] is True and opened.body["head"] == pull["head"]["ref"]
    assert pull["draft"] is False
    assert f"Closes #{issue}" in pull["body"] and "<!-- reqdrive:run " in pull["body"]
    assert "### Stories" in pull["body"] and "### Checks" in pull["body"]
    assert [label["name"] for label in pull["labels"]] == ["agent-generated"]
    head = git(scene.remote, "rev-parse", pull["head"]["ref"])
    final = [r for r in gh.check_runs_of(REPO) if r["head_sha"] == head]
    assert [(r["status"], r["conclusion"]) for r in final] == [("completed", "success")]
    created = [c for c in gh.calls if c.method == "POST" and c.path.endswith("/check-runs")]
    assert created[0].body["status"] == "in_progress"
    assert all(r["status"] == "completed" for r in gh.check_runs_of(REPO))


def test_a_commenter_with_read_or_triage_gets_one_reply_and_nothing_runs(scene: Scene) -> None:
    gh = scene.gh
    issue = gh.add_issue(REPO, "Features", "Build.")
    gh.set_role(REPO, "bob", "triage")
    scene.scenario(three_stories())

    scene.enqueue(
        JobKind.RUN, requirement=f"ISSUE-{issue}", issue_number=issue, sender="bob", comment_id=555
    )
    scene.work()

    [reply] = gh.comments_on(REPO, issue)
    assert "`write` access" in reply["body"] and "`triage`" in reply["body"]
    assert gh.pulls_of(REPO) == [] and not (scene.tmp / "calls.log").exists()


def test_a_bots_comment_does_nothing_at_all(scene: Scene) -> None:
    issue = scene.gh.add_issue(REPO, "Features", "Build.")

    scene.enqueue(
        JobKind.RUN,
        requirement=f"ISSUE-{issue}",
        issue_number=issue,
        sender="reqdrive[bot]",
        comment_id=9,
    )
    scene.work()

    assert scene.gh.writes() == []


def test_an_invalid_config_gets_one_comment_naming_the_key_and_no_run(scene: Scene) -> None:
    gh = scene.gh
    issue = gh.add_issue(REPO, "Features", "Build.")
    gh.set_file(REPO, "main", ".github/reqdrive.yml", "maxIterations: many\ncolour: blue\n")

    scene.enqueue(JobKind.RUN, requirement=f"ISSUE-{issue}", issue_number=issue)
    scene.work()

    [comment] = gh.comments_on(REPO, issue)
    assert "maxIterations" in comment["body"] and "colour" in comment["body"]
    [check] = gh.check_runs_of(REPO)
    assert check["conclusion"] == "action_required"
    assert gh.pulls_of(REPO) == []


def test_a_push_of_a_req_file_opens_a_pr_and_an_edit_updates_the_same_pr(scene: Scene) -> None:
    gh, path = scene.gh, "docs/requirements/REQ-001-demo.md"
    head = git(scene.remote, "rev-parse", "main")
    gh.set_file(REPO, head, path, "# REQ-001\nBuild features one to four.\n")
    scene.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})

    scene.enqueue(JobKind.RUN, requirement=path, head_sha=head)
    scene.work()
    gh.set_file(REPO, "edited", path, "# REQ-001\nBuild feature one, better.\n")
    scene.enqueue(JobKind.RUN, requirement=path, head_sha="edited")
    scene.work()

    [pull] = gh.pulls_of(REPO)
    assert f"`{path}`" in pull["body"]
    # One progress comment on the PR: the edit's run took over the first run's, in place.
    [comment] = progress_comments(gh, pull["number"])
    second = scene.records().for_source(REPO, path)
    assert second is not None and second.text == "# REQ-001\nBuild feature one, better.\n"
    assert f"reqdrive:progress {second.run_id} " in comment["body"]
    posts = [c for c in gh.calls if c.method == "POST" and c.path.endswith("/pulls")]
    assert len(posts) == 1


def test_a_push_outside_the_requirements_folder_is_dropped(scene: Scene) -> None:
    scene.enqueue(JobKind.RUN, requirement="notes/REQ-9.md", head_sha="abc")
    scene.work()

    assert scene.gh.writes() == []


def test_an_empty_req_file_gets_one_clear_comment_and_no_run(scene: Scene) -> None:
    gh, path = scene.gh, "docs/requirements/REQ-002-empty.md"
    gh.set_file(REPO, "abc123", path, "  \n\n")

    scene.enqueue(JobKind.RUN, requirement=path, head_sha="abc123")
    scene.work()

    [comment] = gh.commit_comments
    assert "is empty" in comment["body"] and comment["commit_id"] == "abc123"
    assert gh.pulls_of(REPO) == []


def test_retry_one_story_reruns_only_that_story_and_updates_pr_comment_and_check(
    scene: Scene,
) -> None:
    gh = scene.gh
    issue = gh.add_issue(REPO, "Features", "Build features one to three.")
    broken = implement(3, correct=False)
    scene.scenario(
        {
            "plan": [{"prd": prd(3)}],
            "stories": {
                "US-001": [implement(1)],
                "US-002": [implement(2)],
                "US-003": [broken, broken, broken, implement(3)],
            },
        }
    )
    scene.enqueue(JobKind.RUN, requirement=f"ISSUE-{issue}", issue_number=issue)
    scene.work()
    [pull] = gh.pulls_of(REPO)
    assert pull["draft"] is True
    assert "/reqdrive retry US-003" in progress_comments(gh, issue)[0]["body"]
    calls_before = scene.project.calls()
    scene.scenario({"stories": {"US-003": [implement(3)]}})  # the agent gets it right this time

    scene.enqueue(JobKind.RETRY, issue_number=pull["number"], story_id="US-003", comment_id=77)
    scene.work()

    assert scene.project.calls()[len(calls_before) :] == ["US-003 1"]
    [pull] = gh.pulls_of(REPO)
    assert pull["draft"] is False and "3 passed" in pull["body"]
    assert "✅ Done" in progress_comments(gh, issue)[0]["body"]
    head = git(scene.remote, "rev-parse", pull["head"]["ref"])
    assert [r["conclusion"] for r in gh.check_runs_of(REPO) if r["head_sha"] == head] == ["success"]


def test_github_answering_502_twice_then_200_still_completes_the_run(scene: Scene) -> None:
    gh = scene.gh
    issue = gh.add_issue(REPO, "Features", "Build feature one.")
    scene.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    gh.fail("POST", r"/pulls$", 502, times=2)
    gh.fail("PATCH", r"/issues/comments/", 502, times=2)

    scene.enqueue(JobKind.RUN, requirement=f"ISSUE-{issue}", issue_number=issue)
    scene.work()

    [pull] = gh.pulls_of(REPO)
    assert pull["draft"] is False
    assert "✅ Done" in progress_comments(gh, issue)[0]["body"]


def test_a_cancel_under_an_invalid_config_replies_and_leaves_checks_to_runs(scene: Scene) -> None:
    # A command's token may not write check runs (github/auth.py): the reply names the key alone,
    # where a check run would have been GitHub's 403 and a failed job.
    gh = scene.gh
    issue = gh.add_issue(REPO, "Features", "Build.")
    gh.set_file(REPO, "main", ".github/reqdrive.yml", "maxIterations: many\n")

    job_id = scene.enqueue(
        JobKind.CANCEL, requirement=f"ISSUE-{issue}", issue_number=issue, comment_id=7
    )
    scene.work()

    [reply] = gh.comments_on(REPO, issue)
    assert "maxIterations" in reply["body"]
    assert gh.check_runs_of(REPO) == []
    assert all("checks" not in token["permissions"] for token in gh.tokens)
    assert Job.fetch(job_id, connection=scene.conn, serializer=JSONSerializer).is_finished


def test_status_and_help_reply_once_each(scene: Scene) -> None:
    gh = scene.gh
    issue = gh.add_issue(REPO, "Features", "Build feature one.")
    scene.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    scene.enqueue(JobKind.RUN, requirement=f"ISSUE-{issue}", issue_number=issue)
    scene.work()

    scene.enqueue(JobKind.STATUS, requirement=f"ISSUE-{issue}", issue_number=issue, comment_id=1)
    scene.enqueue(JobKind.HELP, requirement=f"ISSUE-{issue}", issue_number=issue, comment_id=2)
    scene.work()

    replies = [c["body"] for c in gh.comments_on(REPO, issue) if "reqdrive:reply" in c["body"]]
    assert len(replies) == 2
    assert "finished" in replies[0] and "US-001" in replies[0]
    assert "/reqdrive retry US-003" in replies[1]


def test_cancel_during_a_run_stops_the_agent_and_leaves_a_draft(scene: Scene) -> None:
    gh = scene.gh
    issue = gh.add_issue(REPO, "Features", "Build features one and two.")
    pids = scene.tmp / "pids"
    scene.scenario(
        {
            "plan": [{"prd": prd(2)}],
            "stories": {
                "US-001": [implement(1)],
                # Its tests call hangs (tests first): the cancel stops it there.
                "US-002": [{"tests": {"hang": 120, "pids_file": str(pids)}}],
            },
        }
    )
    request = RunRequest(
        kind=JobKind.RUN,
        delivery_id="d1",
        repo=REPO,
        installation_id=7,
        sender="alice",
        requirement=f"ISSUE-{issue}",
        issue_number=issue,
    )
    # The run job in a thread of this process, where the responses stand-in reaches it.
    worker = threading.Thread(target=run_requirement, kwargs=request.model_dump(mode="json"))
    worker.start()
    deadline = time.monotonic() + 60
    while not pids.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pids.exists(), "the agent never started US-002"

    scene.enqueue(JobKind.CANCEL, requirement=f"ISSUE-{issue}", issue_number=issue, comment_id=3)
    cancel_worker = SimpleWorker([scene.queue], connection=scene.conn, serializer=JSONSerializer)
    cancel_worker.work(burst=True)
    worker.join(timeout=90)

    assert not worker.is_alive()
    from tests.support.processes import running

    assert not any(running(int(p)) for p in pids.read_text().split())
    [pull] = gh.pulls_of(REPO)
    assert pull["draft"] is True
    body = progress_comments(gh, issue)[0]["body"]
    assert "Cancelled" in body
    record = scene.records().for_source(REPO, f"ISSUE-{issue}")
    assert record is not None
    cp = RedisCheckpointStore(scene.conn).load(record.run_id)
    assert cp is not None and cp.story("US-001").state is StoryState.PASSED
    assert [r["conclusion"] for r in gh.check_runs_of(REPO)][-1] == "cancelled"


def test_an_edit_pushed_while_the_run_runs_is_run_again_on_the_new_text(scene: Scene) -> None:
    gh, path = scene.gh, "docs/requirements/REQ-001-demo.md"
    head = git(scene.remote, "rev-parse", "main")
    gh.set_file(REPO, head, path, "# REQ-001\nBuild features one to four.\n")
    gh.set_file(REPO, "edited", path, "# REQ-001\nNew text.\n")
    scene.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    job_id = scene.enqueue(JobKind.RUN, requirement=path, head_sha=head)
    newer = RunRequest(
        kind=JobKind.RUN,
        delivery_id="d2",
        repo=REPO,
        installation_id=7,
        sender="alice",
        requirement=path,
        head_sha="edited",
    )
    # What intake stores when the edit arrives while the job above is running.
    scene.conn.set(rerun_key(job_id), json.dumps(newer.model_dump(mode="json")))

    scene.work()

    record = scene.records().for_source(REPO, path)
    assert record is not None and record.text == "# REQ-001\nNew text.\n"
    assert len(gh.pulls_of(REPO)) == 1
    assert scene.conn.get(rerun_key(job_id)) is None
    # The old text's run stopped before its first story (the newer text was already waiting)
    # and ended neutral, superseded; the new text's run built the story.
    assert scene.project.calls() == ["plan 1", "plan 1", "US-001 1 tests", "US-001 1"]
    conclusions = [r["conclusion"] for r in gh.check_runs_of(REPO)]
    assert "neutral" in conclusions and conclusions[-1] == "success"


def test_a_job_queued_under_the_old_worker_jobs_name_runs_the_bot_job(scene: Scene) -> None:
    issue = scene.gh.add_issue(REPO, "Features", "Build.")
    request = RunRequest(
        kind=JobKind.HELP,
        delivery_id="d-old",
        repo=REPO,
        installation_id=7,
        sender="alice",
        requirement=f"ISSUE-{issue}",
        issue_number=issue,
        comment_id=4,
    )
    job = scene.queue.enqueue("worker.jobs.reply_help", kwargs=request.model_dump(mode="json"))

    worker = SimpleWorker(
        [scene.queue], connection=scene.conn, serializer=JSONSerializer, job_class=ReqdriveJob
    )
    worker.work(burst=True)

    assert (
        ReqdriveJob.fetch(job.id, connection=scene.conn, serializer=JSONSerializer).func_name
        == "bot.jobs.reply_help"
    )
    [reply] = scene.gh.comments_on(REPO, issue)
    assert "/reqdrive retry US-003" in reply["body"]


def running_record(
    scene: Scene, run_id: str, branch: str, installation_id: int = 7, pull: int | None = None
) -> None:
    """A run some worker is running (with its pull request): its record and a heartbeat."""
    record = RunRecord(
        run_id=run_id,
        repo=REPO,
        installation_id=installation_id,
        source="ISSUE-9",
        text="x",
        slug="x",
        branch=branch,
        base_branch="main",
        clone_url="unused",
        pull_number=pull,
    )
    scene.records().save(record)
    scene.records().beat(run_id)


def test_closing_a_reqdrive_pull_request_stops_its_run(scene: Scene) -> None:
    running_record(scene, "run-a", "reqdrive/issue-9-x", pull=12)
    running_record(scene, "run-b", "reqdrive/other", pull=13)

    scene.enqueue(
        JobKind.CLOSE,
        issue_number=12,
        branch="reqdrive/issue-9-x",
        sender="github-merge-queue[bot]",
    )
    scene.work()

    assert scene.records().cancel_requested("run-a")
    assert not scene.records().cancel_requested("run-b")
    assert scene.gh.writes() == []  # the run's own comment says it stopped


def test_an_uninstall_drops_the_installations_tokens_and_stops_its_runs(scene: Scene) -> None:
    running_record(scene, "run-a", "reqdrive/a", installation_id=7)
    running_record(scene, "run-b", "reqdrive/b", installation_id=8)
    rt = runtime.current()
    rt.app.auth.token(7, REPO, {"issues": "write"})

    scene.enqueue(JobKind.UNINSTALL, requirement="INSTALLATION-7")
    scene.work()

    assert scene.records().cancel_requested("run-a")
    assert not scene.records().cancel_requested("run-b")
    tokens_before = len(scene.gh.tokens)
    rt.app.auth.token(7, REPO, {"issues": "write"})
    assert len(scene.gh.tokens) == tokens_before + 1  # the cached token was forgotten


def test_a_job_that_raises_is_retried_by_rq_and_reported_once_on_its_last_attempt(
    scene: Scene,
) -> None:
    gh = scene.gh
    issue = gh.add_issue(REPO, "Features", "Build feature one.")
    gh.fail("GET", r"/collaborators/alice/permission$", 422, times=10)  # every attempt fails
    request = RunRequest(
        kind=JobKind.RUN,
        delivery_id="d-err",
        repo=REPO,
        installation_id=7,
        sender="alice",
        requirement=f"ISSUE-{issue}",
        issue_number=issue,
    )
    job = scene.queue.enqueue(
        "bot.jobs.run_requirement", kwargs=request.model_dump(mode="json"), retry=Retry(max=2)
    )

    scene.work()  # the first attempt and RQ's two retries, requeued at once

    assert len([c for c in gh.calls if c.path.endswith("/permission")]) == 3
    assert job.get_status() == JobStatus.FAILED
    [report] = gh.comments_on(REPO, issue)
    assert "unexpected error (`GithubException`)" in report["body"]
    assert job.id in report["body"]
    assert scene.project.calls() == []  # nothing ran


def scan_request(base: str, head: str, delivery_id: str = "d-scan") -> RunRequest:
    return RunRequest(
        kind=JobKind.SCAN,
        delivery_id=delivery_id,
        repo=REPO,
        installation_id=7,
        sender="alice",
        requirement=f"PUSH-{head}",
        head_sha=head,
        base_sha=base,
    )


def run_for(path: str, head: str, delivery_id: str) -> RunRequest:
    return RunRequest(
        kind=JobKind.RUN, delivery_id=delivery_id, repo=REPO, installation_id=7,
        sender="alice", requirement=path, head_sha=head,
    )  # fmt: skip


def test_a_capped_push_asks_compare_and_queues_its_runs_as_intake_would(scene: Scene) -> None:
    base, head = "a" * 40, "b" * 40
    req = "docs/requirements/REQ-{}.md".format
    scene.gh.comparisons[(REPO, base, head)] = [
        (req("001-new"), "added"),
        (req("002-edited"), "modified"),
        (req("003-gone"), "removed"),
        ("docs/requirements/drafts/REQ-9.md", "added"),  # not directly in the folder
        ("src/app.py", "modified"),
    ]
    enqueuer = Enqueuer(scene.conn, QUEUE, 3600)
    # REQ-002 already waits for its run (an earlier push): the scan joins it.
    [earlier] = enqueuer.accept(
        "d-earlier", [run_for(req("002-edited"), "c" * 40, "d-earlier")]
    ).jobs

    result = scan_push(**scan_request(base, head).model_dump(mode="json"))

    wanted = [job_id_for(run_for(req(n), head, "d-scan")) for n in ("001-new", "002-edited")]
    assert result == {"status": "queued", "jobs": wanted}
    assert wanted[1] == earlier.id
    assert scene.queue.get_job_ids() == [earlier.id, wanted[0]]  # one job per requirement
    coalesced = scene.queue.fetch_job(earlier.id)
    assert coalesced is not None and coalesced.kwargs["head_sha"] == head  # the newest text
    [compare] = [c for c in scene.gh.calls if "/compare/" in c.path]
    assert compare.path.endswith(f"/compare/{base}...{head}")
    # GitHub redelivering the push: the same scan, nothing queued twice.
    scan_push(**scan_request(base, head).model_dump(mode="json"))
    assert scene.queue.get_job_ids() == [earlier.id, wanted[0]]


def test_a_comparison_at_its_300_file_cap_falls_back_to_the_requirements_folder(
    scene: Scene,
) -> None:
    base, head = "a" * 40, "b" * 40
    folder = "docs/requirements"
    scene.gh.comparisons[(REPO, base, head)] = [(f"src/f{n}.py", "added") for n in range(300)]
    for ref, texts in (
        (base, {"REQ-001-a": "old", "REQ-002-same": "same", "REQ-003-gone": "x"}),
        (head, {"REQ-001-a": "new", "REQ-002-same": "same", "REQ-004-added": "y"}),
    ):
        for name, text in texts.items():
            scene.gh.set_file(REPO, ref, f"{folder}/{name}.md", text)

    result = scan_push(**scan_request(base, head).model_dump(mode="json"))

    paths = [f"{folder}/REQ-001-a.md", f"{folder}/REQ-004-added.md"]  # changed or new at head
    assert result["jobs"] == [job_id_for(run_for(p, head, "d-scan")) for p in paths]
    listings = [c for c in scene.gh.calls if c.path.endswith(f"/contents/{folder}")]
    assert sorted(c.query["ref"][0] for c in listings) == [base, head]


def test_a_push_to_a_custom_requirements_folder_runs_what_is_in_it_and_nothing_else(
    scene: Scene, redis_url: str
) -> None:
    # The push fixture's repository (default branch master), configured with its requirements
    # in specs/. Intake reads no config, so the push is a scan; the scan reads the config.
    gh, repo = scene.gh, "Codertocat/Hello-World"
    git(scene.remote, "branch", "master", "main")
    gh.add_repo(repo, str(scene.remote), default_branch="master")
    gh.branch_heads[(repo, "master")] = git(scene.remote, "rev-parse", "master")
    config = (gh.file_at(REPO, "main", ".github/reqdrive.yml") or "") + "requirementsDir: specs\n"
    gh.set_file(repo, "master", ".github/reqdrive.yml", config)
    gh.set_role(repo, "Codertocat", "write")
    body = webhooks.push_of([(["specs/REQ-002-x.md", "notes/REQ-003-y.md"], [], [])])
    pushed = json.loads(body)["after"]
    gh.set_file(repo, pushed, "specs/REQ-002-x.md", "# REQ-002\nBuild feature one.\n")
    gh.set_file(repo, pushed, "notes/REQ-003-y.md", "# REQ-003\nA note, not a requirement.\n")
    scene.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    settings = load_settings(github_webhook_secret=webhooks.SECRET, redis_url=redis_url,
                             reqdrive_queue=QUEUE, reqdrive_app_slug="reqdrive")  # fmt: skip
    web = AsgiClient(create_asgi_app(settings))

    answer = web.post("/webhook", data=body, headers=webhooks.headers("push", body))
    [scan] = scene.queue.get_jobs()
    scene.work()

    assert answer.status_code == 202 and scan.func_name == "bot.jobs.scan_push"
    [pull] = gh.pulls_of(repo)
    assert "`specs/REQ-002-x.md`" in pull["body"] and "REQ-003" not in pull["body"]
    assert scene.records().for_source(repo, "specs/REQ-002-x.md") is not None
    assert scene.records().for_source(repo, "notes/REQ-003-y.md") is None
    # A new branch's push has no `before` to compare with: the configured folder is listed.
    listings = [c for c in gh.calls if c.path.endswith(f"/repos/{repo}/contents/specs")]
    assert [c.query["ref"][0] for c in listings] == [pushed]
    assert not [c for c in gh.calls if "notes/" in c.path]


def test_a_run_stopped_at_its_job_timeout_ends_timed_out_and_is_not_retried(
    scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    gh = scene.gh
    issue = gh.add_issue(REPO, "Features", "Build.")

    def times_out(self: object, *steps: object) -> None:
        # What rq's death penalty raises in the work horse when REQDRIVE_JOB_TIMEOUT_HOURS ends.
        raise JobTimeoutException("Task exceeded maximum timeout value (21600 seconds)")

    monkeypatch.setattr(Pipeline, "_steps", times_out)
    job_id = scene.enqueue(JobKind.RUN, requirement=f"ISSUE-{issue}", issue_number=issue)
    scene.work()

    [check] = gh.check_runs_of(REPO)
    assert (check["status"], check["conclusion"]) == ("completed", "timed_out")
    [comment] = progress_comments(gh, issue)
    assert "Stopped" in comment["body"] and "timeout" in comment["body"]
    job = Job.fetch(job_id, connection=scene.conn, serializer=JSONSerializer)
    assert job.get_status() == JobStatus.FINISHED  # ended and reported, not left to rq's retry
