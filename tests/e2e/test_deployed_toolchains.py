"""The App as deployed, on a repository whose checks cannot start: it says so and what to fix."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_run_cli import calls, command, run_cli, scenario_file
from tests.integration.test_pipeline import git
from tests.support.github_double import GitHubDouble
from tests.support.harness import stack, wait_for
from tests.support.scenes import all_calls, shop

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = "octo/shop"


def set_test_command(double: GitHubDouble, tmp_path: Path, command: str) -> None:
    """A commit on the repository's main branch changing its testCommand."""
    clone = tmp_path / "edit"
    subprocess.run(["git", "clone", "-q", str(double.bare(REPO)), str(clone)], check=True)
    config_path = clone / ".github" / "reqdrive.yml"
    config = yaml.safe_load(config_path.read_text())
    config["testCommand"] = command
    config_path.write_text(yaml.safe_dump(config))
    git(clone, "-c", "user.name=o", "-c", "user.email=o@x", "commit", "-qam", "tests")
    git(clone, "push", "-q", "origin", "HEAD:main")
    double.set_file(REPO, "main", ".github/reqdrive.yml", config_path.read_text())


def test_a_check_that_cannot_start_ends_the_run_with_the_fix_in_the_comment_and_check(
    tmp_path: Path, double: GitHubDouble
) -> None:
    scene = shop(tmp_path, double, REPO)
    set_test_command(double, tmp_path, "no-such-tool-xyz --run")
    (tmp_path / "stack").mkdir()
    with stack(double, None, tmp_path / "stack", scene.env()) as running:
        payload = double.labeled_payload(REPO, scene.issue, "reqdrive", "alice")
        assert double.deliver(running.webhook_url, "issues", payload).status_code == 202

        def stopped() -> bool:
            return any("❌ Stopped" in c["body"] for c in double.comments_on(REPO, scene.issue))

        wait_for(stopped, 180, "the run stopped")
        calls = all_calls(running)

    assert calls == []  # no plan, no story: nothing the agent does could make it start
    assert double.pulls_of(REPO) == []
    [progress] = [
        c for c in double.comments_on(REPO, scene.issue) if "reqdrive:progress" in c["body"]
    ]
    body = progress["body"]
    assert "❌ Stopped at the baseline step: the tests check cannot start" in body
    assert "no-such-tool-xyz" in body and "fix: install no-such-tool-xyz" in body
    assert "unverified" not in body
    [check] = double.check_runs_of(REPO)
    assert check["conclusion"] == "failure"
    assert "the tests check cannot start" in str(check["output"])


def test_reqdrive_run_exits_8_when_the_test_runner_is_not_installed(tmp_path: Path) -> None:
    repo = tmp_path / "project"
    (repo / ".github").mkdir(parents=True)
    (repo / ".github" / "reqdrive.yml").write_text("testCommand: python3 -m no_such_runner_xyz\n")
    (repo / "REQ-001-demo.md").write_text("# REQ-001\nA feature.\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=o", "-c", "user.email=o@x", "commit", "-qm", "initial")
    argv = [*command(tmp_path, scenario_file(tmp_path, {})), "--sandbox", "off"]
    argv[argv.index("docs/requirements/REQ-001-demo.md")] = "REQ-001-demo.md"
    done = run_cli(repo, argv)

    assert done.returncode == 8, done.stderr
    assert "the tests check cannot start (`python3 -m no_such_runner_xyz`)" in done.stderr
    assert "-m pip install no_such_runner_xyz" in done.stderr
    assert calls(tmp_path) == []
