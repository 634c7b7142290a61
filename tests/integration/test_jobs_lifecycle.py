"""A reqdrive pull request closed or merged, the App uninstalled: the runs stop, their
worktrees and state go, and commands on a closed pull request get one short reply."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.jobs import drive, lifecycle, run_requirement, runtime
from bot.jobs.lifecycle import end_run
from bot.jobs.runtime import Runtime
from bot.requests import JobKind, RunRequest
from bot.stores.checkpoints import RedisCheckpointStore
from bot.stores.deliveries import rerun_key
from bot.stores.run_locks import run_lock_key
from bot.stores.runs import RunRecord
from bot.stores.spend import SpendStore
from tests.integration.test_jobs import REPO, Scene, scene  # noqa: F401
from tests.integration.test_pipeline import git, implement, prd
from tests.support.processes import running


def built(scene: Scene) -> tuple[int, RunRecord, dict[str, object]]:  # noqa: F811
    """A finished run of an issue, its record and its pull request. Two stories, not three:
    what these tests end concerns the run, not its count of stories (each one more costs a
    tests call, an implement call and their checks), and a retry needs a second story."""
    issue = scene.gh.add_issue(REPO, "Features", "Build features one and two.")
    scene.scenario(
        {"plan": [{"prd": prd(2)}], "stories": {f"US-00{n}": [implement(n)] for n in (1, 2)}}
    )
    scene.enqueue(JobKind.RUN, requirement=f"ISSUE-{issue}", issue_number=issue)
    scene.work()
    record = scene.records().for_source(REPO, f"ISSUE-{issue}")
    assert record is not None
    [pull] = scene.gh.pulls_of(REPO)
    return issue, record, pull


def work_dir(scene: Scene) -> Path:  # noqa: F811
    return Path(scene.project.work_dir)


def replies(scene: Scene, number: int) -> list[str]:  # noqa: F811
    return [c["body"] for c in scene.gh.comments_on(REPO, number) if "reqdrive:reply" in c["body"]]


def test_a_merged_pull_requests_run_state_goes_and_commands_on_it_get_one_short_reply(
    scene: Scene,  # noqa: F811
) -> None:
    _issue, record, pull = built(scene)
    number = int(str(pull["number"]))
    checkpoints = RedisCheckpointStore(scene.conn)
    assert checkpoints.load(record.run_id) is not None
    assert (work_dir(scene) / "runs" / record.run_id).is_dir()
    scene.conn.set(rerun_key(record.job_id or ""), "{}")  # an edit waiting to run after it
    pull.update(state="closed", merged=True)

    scene.enqueue(JobKind.CLOSE, issue_number=number, branch=record.branch, merged=True)
    scene.work()

    assert checkpoints.load(record.run_id) is None
    assert not (work_dir(scene) / "runs" / record.run_id).exists()
    assert not (work_dir(scene) / "cache" / "worktrees" / record.run_id).exists()
    assert scene.conn.get(rerun_key(record.job_id or "")) is None
    # What was pushed stays: the branch on the remote is untouched.
    assert git(scene.remote, "rev-parse", record.branch)

    writes = len(scene.gh.writes())
    for kind, comment in ((JobKind.RETRY, 21), (JobKind.STATUS, 22), (JobKind.RUN, 23)):
        scene.enqueue(kind, issue_number=number, comment_id=comment)
    scene.work()

    said = replies(scene, number)
    assert len(said) == 3
    assert all(
        body.startswith("This pull request is merged, so reqdrive does nothing more on it")
        for body in said
    )
    assert scene.project.calls().count("plan 1") == 1  # nothing ran again
    assert len(scene.gh.writes()) == writes + 6  # a 👀 and the one reply, per command


def test_another_pull_request_from_a_branch_of_the_same_name_ends_nothing(
    scene: Scene,  # noqa: F811
) -> None:
    # A fork can name its branch reqdrive/<slug> and close its own pull request.
    _issue, record, pull = built(scene)
    checkpoints = RedisCheckpointStore(scene.conn)
    other = int(str(pull["number"])) + 100

    scene.enqueue(JobKind.CLOSE, issue_number=other, branch=record.branch, merged=False)
    scene.work()

    assert checkpoints.load(record.run_id) is not None
    assert (work_dir(scene) / "runs" / record.run_id).is_dir()
    assert scene.records().gone(record.run_id) is None


def test_closing_a_pull_request_while_its_run_runs_stops_it_and_its_worker_removes_it(
    scene: Scene,  # noqa: F811
) -> None:
    gh = scene.gh
    issue = gh.add_issue(REPO, "Features", "Build features one and two.")
    pids = scene.tmp / "pids"
    scene.scenario(
        {
            "plan": [{"prd": prd(2)}],
            "stories": {
                "US-001": [implement(1)],
                # Its tests call hangs (tests first) until the pull request closes.
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
    worker = threading.Thread(target=run_requirement, kwargs=request.model_dump(mode="json"))
    worker.start()
    deadline = time.monotonic() + 60
    while not pids.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pids.exists(), "the agent never started US-002"
    record = scene.records().for_source(REPO, f"ISSUE-{issue}")
    assert record is not None
    [pull] = gh.pulls_of(REPO)  # US-001 passed: the draft is open
    pull.update(state="closed")
    worktree = work_dir(scene) / "cache" / "worktrees" / record.run_id
    assert worktree.is_dir()

    scene.enqueue(JobKind.CLOSE, issue_number=pull["number"], branch=record.branch, merged=False)
    scene.work()
    worker.join(timeout=90)

    assert not worker.is_alive()
    assert not any(running(int(p)) for p in pids.read_text().split())
    assert RedisCheckpointStore(scene.conn).load(record.run_id) is None
    assert not (work_dir(scene) / "runs" / record.run_id).exists()
    assert not worktree.exists()
    assert not scene.records().alive(record.run_id)
    # US-001 stays pushed.
    assert git(scene.remote, "log", "--format=%s", f"main..{record.branch}").splitlines() == [
        "feat: [US-001] - Feature 1",
        "test: [US-001] - Feature 1",
    ]


def test_an_uninstall_drops_every_run_of_the_installation_and_its_spend(
    scene: Scene,  # noqa: F811
) -> None:
    issue, record, _pull = built(scene)
    spend = SpendStore(scene.conn)
    spend.charge(7, record.run_id, 0.4)
    spend.charge(8, "run-of-another-installation", 0.4)

    scene.enqueue(JobKind.UNINSTALL, requirement="INSTALLATION-7")
    scene.work()

    assert scene.records().load(record.run_id) is None
    assert scene.records().for_source(REPO, f"ISSUE-{issue}") is None
    assert RedisCheckpointStore(scene.conn).load(record.run_id) is None
    assert not (work_dir(scene) / "runs" / record.run_id).exists()
    assert spend.total(7) == 0.0 and spend.total(8) == 0.4


def test_a_close_handled_before_a_run_takes_its_lock_ends_the_run_instead_of_starting_it(
    scene: Scene,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `/reqdrive retry US-002` passed its checks (the pull request was open), then the close
    # of the pull request was handled before the retry's job took the run lock: the close
    # found no run going and removed its state, and the retry must not bring it back.
    _issue, record, pull = built(scene)
    number = int(str(pull["number"]))
    calls = len(scene.project.calls())
    locking = drive.run_lock

    @contextmanager
    def closed_first(rt: Runtime, run: RunRecord) -> Iterator[Any]:
        pull.update(state="closed")
        assert end_run(rt, run, "closed") == "removed"
        with locking(rt, run) as lock:
            yield lock

    monkeypatch.setattr(drive, "run_lock", closed_first)
    scene.enqueue(JobKind.RETRY, issue_number=number, comment_id=31, story_id="US-002")
    scene.work()

    assert len(scene.project.calls()) == calls  # no agent call: the retry never started
    assert RedisCheckpointStore(scene.conn).load(record.run_id) is None
    assert not (work_dir(scene) / "runs" / record.run_id).exists()
    assert not (work_dir(scene) / "cache" / "worktrees" / record.run_id).exists()
    assert not scene.records().alive(record.run_id)
    assert scene.records().gone(record.run_id) == "closed"


def test_the_cleanup_lock_is_renewed_while_a_long_cleanup_runs(
    scene: Scene,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A cleanup longer than the lock's lifetime (a large worktree, a slow disk) keeps the
    # run's lock: otherwise a new run of the requirement could start on what is being removed.
    _issue, record, _pull = built(scene)
    monkeypatch.setattr(lifecycle, "FORGET_LOCK_S", 1.0)
    key = run_lock_key(record.repo, record.source)
    remove = lifecycle._forget_local
    held: list[bool] = []

    def slow(rt: Runtime, run: RunRecord) -> None:
        time.sleep(3 * lifecycle.FORGET_LOCK_S)  # three lifetimes of the lock
        held.append(bool(scene.conn.exists(key)))
        remove(rt, run)

    monkeypatch.setattr(lifecycle, "_forget_local", slow)
    assert lifecycle.forget_run(runtime.current(), record)

    assert held == [True]
    assert not scene.conn.exists(key)  # released once done
    assert not (work_dir(scene) / "runs" / record.run_id).exists()
