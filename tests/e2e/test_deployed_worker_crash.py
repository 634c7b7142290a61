"""As deployed: the worker's process group SIGKILLed right after the first story is pushed; a
new worker finishes the run from its checkpoint, through the GitHub double."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from rq import Queue
from rq.registry import ScheduledJobRegistry, StartedJobRegistry
from rq.serializers import JSONSerializer

from tests.integration.test_pipeline import git, implement
from tests.support.github_double import GitHubDouble
from tests.support.harness import stack, wait_for
from tests.support.leaks import assert_no_secrets
from tests.support.scenes import agent_calls, shop

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = "octo/shop"
TAKEOVER_LIMIT_S = 120.0  # issue 6: a lost run is resumed by another worker within two minutes


def test_a_worker_killed_after_the_first_push_is_replaced_and_the_run_finishes_once(
    tmp_path: Path, double: GitHubDouble
) -> None:
    # US-002's agent takes a few seconds, so the kill lands while the run is between stories
    # or inside the second one, never after it.
    stories = {"US-001": [implement(1)], "US-002": [{**implement(2), "sleep": 3}]}
    scene = shop(tmp_path, double, REPO, stories=stories)
    root = tmp_path / "stack"
    root.mkdir()
    # Recovery's documented knobs, shortened so the takeover takes seconds, not a minute.
    recovery = {"REQDRIVE_HEARTBEAT_TTL_S": "6", "REQDRIVE_RECOVERY_SWEEP_S": "2"}
    with stack(double, None, root, {**scene.env(), **recovery}) as running:
        payload = double.labeled_payload(REPO, scene.issue, "reqdrive", "alice")
        assert double.deliver(running.webhook_url, "issues", payload).status_code == 202

        def story_pushed() -> bool:
            return any(p["ref"].startswith("refs/heads/reqdrive/") for p in double.pushes)

        wait_for(story_pushed, 60, "the first story was pushed")
        running.kill_group(running.workers[0])
        killed_at = time.monotonic()
        pushes_at_kill = len(double.pushes)
        running.start_worker()

        def finished() -> bool:
            return any("✅ Done" in c["body"] for c in double.comments_on(REPO, scene.issue))

        try:
            wait_for(finished, TAKEOVER_LIMIT_S + 30, "a new worker finished the run")
        except AssertionError:
            raise AssertionError(running.logs()[-6000:]) from None
        took = time.monotonic() - killed_at
        # rq's own cleanup of the killed worker's job, as a worker's maintenance runs it
        # minutes later: it must not run the job a second time.
        conn = redis.Redis.from_url(running.redis_url)
        queue = Queue("reqdrive", connection=conn, serializer=JSONSerializer)
        StartedJobRegistry(queue=queue).cleanup(time.time() + 3600)
        # rq leaves ScheduledJobRegistry's own __init__ (*args, **kwargs) unannotated.
        retries = ScheduledJobRegistry(queue=queue)  # type: ignore[no-untyped-call]
        scheduled = retries.get_job_ids() + queue.get_job_ids()
        conn.close()
        time.sleep(2)  # a duplicate resume, if one was queued, would have started by now
        [calls] = agent_calls(running).values()

    assert pushes_at_kill == 1
    assert scheduled == []
    assert took < TAKEOVER_LIMIT_S
    assert calls.count("plan 1") == 1
    assert calls.count("US-001 1") == 1  # the pushed story is not re-done
    assert calls[-1].startswith("US-002")
    [pull] = double.pulls_of(REPO)
    branch = pull["head"]["ref"]
    assert git(double.bare(REPO), "log", "--format=%s", f"main..{branch}").splitlines() == [
        "feat: [US-002] - Feature 2",
        "feat: [US-001] - Feature 1",
    ]
    assert pull["draft"] is False
    [progress] = [
        c for c in double.comments_on(REPO, scene.issue) if "reqdrive:progress" in c["body"]
    ]
    assert "another worker resumed the run" in progress["body"]
    assert "✅ Done" in progress["body"]
    assert all(r["status"] == "completed" for r in double.check_runs_of(REPO))
    head = git(double.bare(REPO), "rev-parse", branch)
    [check] = [r for r in double.check_runs_of(REPO) if r["head_sha"] == head]
    assert check["conclusion"] == "success"
    assert "another worker resumed the run" in str(check["output"])
    assert_no_secrets(double, root)
