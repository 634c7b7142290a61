"""reqdrive as deployed: the Procfile's web and worker processes, real Redis, git over HTTP and
the GitHub API at the double's socket, driven only by signed deliveries."""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_pipeline import git, implement, prd, project_factory
from tests.support.github_double import GitHubDouble, github_double
from tests.support.harness import stack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = "octo/shop"


@pytest.fixture
def double(tmp_path: Path) -> Iterator[GitHubDouble]:
    with github_double(tmp_path / "github") as gh:
        yield gh


def test_label_on_an_issue_opens_a_pr_with_one_commit_per_story(
    tmp_path: Path, double: GitHubDouble, redis_url: str
) -> None:
    project = project_factory(tmp_path)(config={"agent": {"runner": "command", "timeout": 120}})
    source = tmp_path / "source"
    double.add_repository(REPO, source)
    double.set_file(
        REPO, "main", ".github/reqdrive.yml", (source / ".github/reqdrive.yml").read_text()
    )
    double.set_role(REPO, "alice", "write")
    issue = double.add_issue(REPO, "Features", "Build features one and two.")
    scenario = project.scenario(
        {"plan": [{"prd": prd(2)}], "stories": {"US-001": [implement(1)], "US-002": [implement(2)]}}
    )
    root = tmp_path / "stack"
    root.mkdir()
    with stack(
        double,
        redis_url,
        root,
        REQDRIVE_AGENT_COMMAND=project.agent_command(scenario),
        REQDRIVE_SANDBOX="off",
        REQDRIVE_GITHUB_REQUEST_INTERVAL_S="0",
        REQDRIVE_GITHUB_WRITE_INTERVAL_S="0",
    ) as running:
        payload = double.labeled_payload(REPO, issue, "reqdrive", "alice")
        assert double.deliver(running.webhook_url, "issues", payload).status_code == 202

        def finished() -> bool:
            return any("✅ Done" in c["body"] for c in double.comments_on(REPO, issue))

        try:
            wait_for(finished, 240, "the run finished")
        except AssertionError:
            raise AssertionError(running.logs()[-4000:]) from None
        logs = running.logs()

    [pull] = double.pulls_of(REPO)
    bare = double.bare(REPO)
    branch = pull["head"]["ref"]
    assert git(bare, "log", "--format=%s", f"main..{branch}").splitlines() == [
        "feat: [US-002] - Feature 2",
        "feat: [US-001] - Feature 1",
    ]
    head = git(bare, "rev-parse", branch)
    checks = [r for r in double.check_runs_of(REPO) if r["head_sha"] == head]
    assert [(r["status"], r["conclusion"]) for r in checks] == [("completed", "success")]
    assert pull["draft"] is False
    [progress] = [c for c in double.comments_on(REPO, issue) if "reqdrive:progress" in c["body"]]
    assert "✅ Done" in progress["body"]

    clone = tmp_path / "fresh"
    token = double.issue_token(double.installation_of(REPO))
    fetched = subprocess.run(
        [
            "git",
            "-c",
            f"http.extraHeader=Authorization: Basic {_basic(token)}",
            "clone",
            "-q",
            "--branch",
            branch,
            double.repos[REPO]["clone_url"],
            str(clone),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert fetched.returncode == 0, fetched.stderr
    tests = subprocess.run(
        ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=clone,
        capture_output=True,
        text=True,
        check=False,
    )
    assert tests.returncode == 0, tests.stdout

    visible = [pull["body"] or "", *(c["body"] for c in double.comments.values())]
    visible += [str(r.get("output", "")) for r in double.check_runs.values()]
    for secret in double.secrets():
        assert all(secret not in text for text in visible), "a secret reached GitHub"
        assert secret not in logs, "a secret reached the logs"


def _basic(token: str) -> str:
    return base64.b64encode(f"x-access-token:{token}".encode()).decode()
