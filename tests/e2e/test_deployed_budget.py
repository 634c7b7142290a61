"""budgetUsd as deployed, with the real Claude Code CLI: the Procfile's processes, the GitHub
double and the scripted Messages API. A $0.50 budget reached in the middle of a story's call
stops the run there, says "budget reached" in the progress comment, the check run and the draft
pull request, keeps what passed pushed and the run's checkpoint to take up again; `/reqdrive
status` and `reqdrive status` show the spend per run and per installation this month."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis
import yaml

from bot.stores.checkpoints import RedisCheckpointStore
from bot.stores.runs import RunRecords
from tests.e2e.test_deployed_claude import (
    API_KEY,
    DISCOUNT,
    REPO,
    TOTAL,
    claude_bin,  # noqa: F401
    plan,
    run_to_the_end,
    shop,
)
from tests.integration.test_pipeline import git
from tests.support.fake_anthropic import CWD, PRD_PATH, ToolCall, Turn, Usage, say, stall, use
from tests.support.github_double import GitHubDouble
from tests.support.harness import sandbox_readonly, sandbox_works, stack, wait_for
from worker.model.state import StopReason, StoryState

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BUDGET_USD = 0.5
# A reply the stream prices at $0.12 (sonnet: 40k tokens in at $3 a million): four stay under
# what the budget leaves US-002 (the cheap plan and US-001 spent under a cent), the fifth
# reaches it while the CLI waits on the next reply, which never comes.
COSTLY = Usage(input_tokens=40_000, output_tokens=1)
SPEND_RE = re.compile(r"Agent spend: this run \$(\d+\.\d\d); this installation \$(\d+\.\d\d) in ")


def script() -> list[Turn]:
    """The plan and US-001 cheap; US-002 reads with costly replies until the budget stops its
    call between two turns; then, the budget raised, US-002 again, done."""
    pricing = f"{CWD}/pricing.py"
    costly_read = use(ToolCall("Read", {"file_path": pricing}), usage=COSTLY)
    discount = {"file_path": pricing, "old_string": TOTAL, "new_string": TOTAL + DISCOUNT}
    return [
        use(ToolCall("Write", {"file_path": PRD_PATH, "content": json.dumps(plan())})),
        say("Planned two stories."),
        use(ToolCall("Write", {"file_path": pricing, "content": TOTAL})),
        say("total() done."),
        *[costly_read] * 5,
        stall(),
        # Taken up again: US-002 only.
        use(ToolCall("Read", {"file_path": pricing})),  # the CLI edits only what it read
        use(ToolCall("Edit", discount)),
        say("discount() done."),
    ]


def budgeted_shop(source: Path) -> None:
    shop(source)
    config = yaml.safe_load((source / ".github/reqdrive.yml").read_text())
    config["budgetUsd"] = BUDGET_USD
    # The stopped call may be killed before or after it asks for the reply that never comes:
    # when after, the call taken up again gets that stall and times out, and its next attempt
    # goes on with the script. A short timeout keeps that wait short.
    config["agent"]["timeout"] = 45
    (source / ".github/reqdrive.yml").write_text(yaml.safe_dump(config))
    git(source, "commit", "-qam", "budget")


def test_a_half_dollar_budget_reached_mid_call_stops_the_run_and_says_so_with_nothing_lost(
    tmp_path: Path,
    double: GitHubDouble,
    claude_bin: Path,  # noqa: F811
) -> None:
    source = tmp_path / "source"
    budgeted_shop(source)
    double.add_repository(REPO, source)
    double.set_file(
        REPO, "main", ".github/reqdrive.yml", (source / ".github/reqdrive.yml").read_text()
    )
    double.set_role(REPO, "alice", "write")
    issue = double.add_issue(REPO, "Pricing", "Add total() and discount() to pricing.py.")
    (tmp_path / "stack").mkdir()
    path = (str(claude_bin.parent), str(Path(sys.executable).parent), os.environ["PATH"])
    env = {
        "PATH": os.pathsep.join(path),
        "ANTHROPIC_API_KEY": API_KEY,
        "REQDRIVE_SANDBOX_READONLY": sandbox_readonly(),
        "REQDRIVE_GITHUB_REQUEST_INTERVAL_S": "0",
        "REQDRIVE_GITHUB_WRITE_INTERVAL_S": "0",
    }
    if not sandbox_works():
        env["REQDRIVE_SANDBOX"] = "off"
    with stack(double, None, tmp_path / "stack", env, model_api=script()) as running:
        # Copies: the double updates these in place when the run taken up again edits them.
        progress = copy.deepcopy(run_to_the_end(double, running, issue))
        conn = redis.Redis.from_url(running.redis_url)
        record = RunRecords(conn).for_source(REPO, f"ISSUE-{issue}")
        assert record is not None
        cp = RedisCheckpointStore(conn).load(record.run_id)
        [pull] = copy.deepcopy(double.pulls_of(REPO))
        stopped_head = git(double.bare(REPO), "rev-parse", pull["head"]["ref"])
        checks = copy.deepcopy(
            [r for r in double.check_runs_of(REPO) if r["head_sha"] == stopped_head]
        )
        status = double.comment_payload(REPO, int(pull["number"]), "/reqdrive status", "alice")
        assert double.deliver(running.webhook_url, "issue_comment", status).status_code == 202

        def replied() -> list[str]:
            comments = double.comments_on(REPO, int(pull["number"]))
            return [c["body"] for c in comments if "Agent spend:" in c["body"]]

        wait_for(lambda: bool(replied()), 60, "the status reply")
        cli = subprocess.run(
            [sys.executable, "-m", "bot.cli", "status"],
            env={**os.environ, "REDIS_URL": running.redis_url, "REQDRIVE_WORK_DIR": ""},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        logs = running.logs()
        # Taken up where it stopped, as its progress comment says: `/reqdrive run` on the PR
        # (a person asking again gives the run its budgetUsd anew).
        again = double.comment_payload(REPO, int(pull["number"]), "/reqdrive run", "alice")
        assert double.deliver(running.webhook_url, "issue_comment", again).status_code == 202

        def done() -> bool:
            comments = double.comments_on(REPO, issue)
            return any("✅ Done" in c["body"] for c in comments if "reqdrive:progress" in c["body"])

        try:
            wait_for(done, 300, "the run taken up again is done")
        except AssertionError:
            bodies = [c["body"] for c in double.comments_on(REPO, issue)]
            raise AssertionError("\n---\n".join(bodies) + running.logs()[-3000:]) from None
        resumed = RedisCheckpointStore(conn).load(record.run_id)
        requests = running.model_requests()

    # Stopped mid-run by the budget, and said so everywhere a person looks.
    assert "budget reached (the run's budgetUsd)" in progress["body"], logs[-6000:]
    assert "comment `/reqdrive run` to go on from US-002, where the run stopped" in progress["body"]
    assert pull["draft"] is True
    assert "Stopped because: budget reached (the run's budgetUsd)." in pull["body"]
    bare = double.bare(REPO)
    branch = pull["head"]["ref"]
    head = stopped_head
    [check] = checks
    assert check["conclusion"] == "action_required"
    assert "budget reached" in check["output"]["summary"]
    # Stopped between US-002's turns, not at the agent's timeout: the streamed replies priced.
    assert cp is not None and cp.stop_reason is StopReason.BUDGET_SPENT
    assert cp.cost_usd >= BUDGET_USD
    # Nothing lost: US-001's commit is pushed, and the checkpoint holds the plan, US-001
    # passed at that commit and US-002 still to do, on the branch as pushed.
    assert git(bare, "log", "--format=%s", f"main..{head}").splitlines() == [
        "feat: [US-001] - Sum a basket"
    ]
    first, second = cp.stories
    assert first.state is StoryState.PASSED and first.commit == head == cp.head_sha
    assert second.state is not StoryState.PASSED
    assert "pricing.py" in git(bare, "show", "--name-only", "--format=", head)
    # Spend per run and per installation this month, on GitHub and on the command line.
    [reply] = replied()
    found = SPEND_RE.search(reply)
    assert found is not None, reply
    assert float(found.group(1)) == pytest.approx(cp.cost_usd, abs=0.01)
    assert float(found.group(2)) == pytest.approx(cp.cost_usd, abs=0.01)
    installation = double.installation_of(REPO)
    assert f"  installation {installation}: ${cp.cost_usd:.2f}" in cli.stdout, cli.stderr
    assert f"    {record.run_id}: ${cp.cost_usd:.2f}" in cli.stdout

    # Taken up again: the plan and US-001 kept (no second plan, US-001 not redone), US-002
    # done on top with the budget anew, the same pull request ready, the cost adding up.
    prompts = [
        r.prompt() for r in requests if all(m.get("role") != "assistant" for m in r.messages)
    ]
    assert [p for p in prompts if "Story ID: US-001" in p] == prompts[1:2]
    assert len([p for p in prompts if "Story ID: US-002" in p]) in (2, 3)
    [after] = double.pulls_of(REPO)
    assert after["number"] == pull["number"] and after["draft"] is False
    assert "**2 stories: 2 passed**" in after["body"]
    assert git(bare, "log", "--format=%s", f"main..{branch}").splitlines() == [
        "feat: [US-002] - Apply a discount",
        "feat: [US-001] - Sum a basket",
    ]
    assert resumed is not None and resumed.cost_usd >= cp.cost_usd
