"""Time from a delivery to reqdrive's first GitHub write (idle worker), and API writes per story.

Real processes: `reqdrive serve` (the Procfile's web process), one `reqdrive worker`, Redis on
127.0.0.1, and a small HTTP server on 127.0.0.1 answering the GitHub API calls (the tests' fake
GitHub, served). A signed `issues.labeled` delivery is posted to the web process; the first
write the fake receives (the 👀 reaction) ends the measurement. Each run is let finish before the
next delivery, so the worker is idle when it arrives. Writes per story are the marginal writes of
a three-story run over a one-story run (everything per run, not per story, cancels out).

Usage: .venv/bin/python -m bench.github [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from bot.ops.replay import signature
from tests.support.github_http import FakeGitHub, private_key_pem, served_fake_github
from tests.support.ports import free_port
from tests.support.redis_db import claimed_database, redis_server

ROOT = Path(__file__).resolve().parents[1]
AGENT = ROOT / "tests" / "support" / "scripted_agent.py"
LABELED = ROOT / "tests" / "fixtures" / "github" / "webhooks" / "issues" / "labeled.payload.json"
REPO = "octo/bench"
SECRET = "bench-secret"  # noqa: S105 - signs deliveries to a local server only
GOAL_FIRST_WRITE_S = 2.0
GOAL_WRITES_PER_STORY = 4


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def story(n: int) -> dict[str, Any]:
    return {
        "id": f"US-00{n}",
        "title": f"Feature {n}",
        "description": f"feature {n}",
        "acceptanceCriteria": [f"feature {n} exists"],
        "priority": n,
        "passes": False,
        "attempts": 0,
        "notes": "",
    }


def make_repo(tmp: Path) -> Path:
    source = tmp / "source"
    source.mkdir()
    git(source, "init", "-q", "-b", "main")
    config = {"agent": {"runner": "command", "timeout": 60}, "testCommand": "true"}
    (source / ".github").mkdir()
    (source / ".github" / "reqdrive.yml").write_text(yaml.safe_dump(config))
    (source / "README.md").write_text("bench\n")
    git(source, "add", "-A")
    git(source, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "initial")
    remote = tmp / "remote.git"
    git(tmp, "clone", "-q", "--bare", str(source), str(remote))
    return remote


def delivery(issue: int) -> bytes:
    payload = json.loads(LABELED.read_text())
    payload["repository"]["full_name"] = REPO
    payload["repository"]["name"] = REPO.split("/")[1]
    payload["issue"]["number"] = issue
    payload["label"]["name"] = "reqdrive"
    payload["sender"]["login"] = "alice"
    payload["installation"] = {"id": 7, "node_id": "I_7"}
    return json.dumps(payload).encode()


def post(port: int, body: bytes) -> None:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/webhook",
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "issues",
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": signature(SECRET, body),
        },
    )
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
        assert answer.status == 202, answer.status


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
            return True
    except OSError:
        return False


def wait_for(check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("not in time")
        time.sleep(0.05)


def one_run(gh: FakeGitHub, port: int, stories: int, scenario: Path, tmp: Path) -> dict[str, Any]:
    issue = gh.add_issue(REPO, f"Bench {stories}", "Build the features.")
    plan = {
        "version": "1",
        "project": "Bench",
        "sourceReq": "bench",
        "userStories": [story(n) for n in range(1, stories + 1)],
    }
    steps = {f"US-00{n}": [{"write": {f"f{issue}_{n}.txt": "x\n"}}] for n in range(1, stories + 1)}
    scenario.write_text(json.dumps({"plan": [{"prd": plan}], "stories": steps}))
    before = len(gh.calls)
    sent = time.time()
    post(port, delivery(issue))

    def done() -> bool:
        bodies = [c["body"] for c in gh.comments_on(REPO, issue)]
        return any("✅ Done" in b or "🟡 Finished" in b for b in bodies)

    wait_for(done, 120)
    time.sleep(0.5)  # the last writes after the final comment edit
    calls = gh.calls[before:]
    writes = [c for c in calls if c.method != "GET" and "access_tokens" not in c.path]
    return {
        "first_write_s": writes[0].at - sent,
        "writes": len(writes),
        "first": f"{writes[0].method} {writes[0].path}",
        "written": [f"{c.method} {'/'.join(c.path.split('/')[-2:])}" for c in writes],
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="reqdrive-bench-github-") as tmp_name,
        served_fake_github() as gh,
        redis_server() as base,
        claimed_database(base) as redis_url,
    ):
        tmp = Path(tmp_name)
        remote = make_repo(tmp)
        gh.add_repo(REPO, str(remote))
        gh.branch_heads[(REPO, "main")] = git(remote, "rev-parse", "main")
        gh.set_file(
            REPO,
            "main",
            ".github/reqdrive.yml",
            (tmp / "source" / ".github" / "reqdrive.yml").read_text(),
        )
        gh.set_role(REPO, "alice", "admin")
        scenario = tmp / "scenario.json"
        port = free_port()
        env = {
            **os.environ,
            "GITHUB_WEBHOOK_SECRET": SECRET,
            "GITHUB_APP_ID": "42",
            "GITHUB_PRIVATE_KEY": private_key_pem(),
            "GITHUB_API_URL": gh.api,
            "REDIS_URL": redis_url,
            "REQDRIVE_WORK_DIR": str(tmp / "work"),
            "WEB_CONCURRENCY": "1",
            "REQDRIVE_SANDBOX": "off",
            "REQDRIVE_AGENT_COMMAND": f"{sys.executable} {AGENT} --scenario {scenario} "
            "--prompt {prompt_file} --run-dir {run_dir}",
        }
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "bot.cli", "serve", "--port", str(port)],
                env=env,
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            ),
            subprocess.Popen(
                [sys.executable, "-m", "bot.cli", "worker"],
                env=env,
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            ),
        ]
        try:
            wait_for(lambda: healthy(port), 60)
            time.sleep(2)  # the worker is listening and idle
            singles = [one_run(gh, port, 1, scenario, tmp) for _ in range(args.runs)]
            triple = one_run(gh, port, 3, scenario, tmp)
        finally:
            for proc in procs:
                os.killpg(proc.pid, signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
    firsts = sorted(r["first_write_s"] for r in singles)
    per_story = (triple["writes"] - statistics.median(r["writes"] for r in singles)) / 2
    figures = {
        "first_write_s": [round(f, 3) for f in firsts],
        "first_write_median_s": round(statistics.median(firsts), 3),
        "first_write_max_s": round(max(firsts), 3),
        "first_write": singles[0]["first"],
        "writes_one_story_run": [r["writes"] for r in singles],
        "writes_three_story_run": triple["writes"],
        "writes_per_story": per_story,
        "three_story_run_writes": triple["written"],
    }
    print(json.dumps(figures, indent=2))
    ok = max(firsts) < GOAL_FIRST_WRITE_S and per_story <= GOAL_WRITES_PER_STORY
    print(
        f"goals: first write < {GOAL_FIRST_WRITE_S:g} s, writes per story <= "
        f"{GOAL_WRITES_PER_STORY}: {'met' if ok else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
