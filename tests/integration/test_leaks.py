"""The shared secret check finds a credential wherever the stack could have left it."""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import webhooks
from tests.support.github_double import GitHubDouble, github_double
from tests.support.leaks import assert_no_secrets

REPO = "acme/shop"


@pytest.fixture
def double(tmp_path: Path) -> Iterator[GitHubDouble]:
    with github_double(tmp_path / "github") as gh:
        gh.add_repo(REPO, f"{gh.base}/git/{REPO}.git")
        yield gh


def test_a_clean_stack_passes(tmp_path: Path, double: GitHubDouble) -> None:
    token = double.issue_token(1)
    issue = double.add_issue(REPO, "Features", "Build them.")
    double.comments[1] = {"id": 1, "body": "working on it", "_issue": (REPO, issue)}
    (tmp_path / "stack").mkdir()
    (tmp_path / "stack" / "worker-1.log").write_text(f"token {token[:6]}… redacted\n")

    assert_no_secrets(double, tmp_path / "stack")


@pytest.mark.parametrize(
    "leak",
    ["token", "basic", "key line", "webhook secret"],
)
def test_a_secret_in_a_file_under_the_stack_is_named(
    tmp_path: Path, double: GitHubDouble, leak: str
) -> None:
    token = double.issue_token(1)
    text = {
        "token": token,
        "basic": base64.b64encode(f"x-access-token:{token}".encode()).decode(),
        "key line": double.private_key_pem.splitlines()[5],
        "webhook secret": webhooks.SECRET,
    }[leak]
    run = tmp_path / "stack" / "work" / "runs" / "r-1"
    run.mkdir(parents=True)
    (run / "iteration-1.log").write_text(f"agent said {text}\n")

    with pytest.raises(AssertionError, match=r"iteration-1\.log"):
        assert_no_secrets(double, tmp_path / "stack")


def test_a_token_in_a_comment_pr_or_check_run_is_named(double: GitHubDouble) -> None:
    token = double.issue_token(1)
    issue = double.add_issue(REPO, "Features", "Build them.")
    double.comments[7] = {"id": 7, "body": f"push with {token}", "_issue": (REPO, issue)}
    double.pulls[(REPO, 2)] = {"title": "Features", "body": "clean", "head": {"ref": "x"}}
    double.check_runs[3] = {"output": {"summary": f"x {token}"}, "_repo": REPO}

    with pytest.raises(AssertionError) as failed:
        assert_no_secrets(double)

    assert "comment 7" in str(failed.value)
    assert "check run 3" in str(failed.value)
    assert "pull" not in str(failed.value)


def test_a_secret_committed_to_a_pull_requests_branch_is_named(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "one"]):
        subprocess.run(["git", *args], cwd=source, check=True, capture_output=True)
    with github_double(tmp_path / "github") as double:
        double.add_repository(REPO, source)
        token = double.issue_token(1)
        (source / "config.env").write_text(f"GH_TOKEN={token}\n")
        for args in (["checkout", "-q", "-b", "reqdrive/x"], ["add", "-A"],
                     ["commit", "-q", "-m", "feat: x"]):  # fmt: skip
            subprocess.run(["git", *args], cwd=source, check=True, capture_output=True)
        bare = str(double.bare(REPO))
        subprocess.run(["git", "push", "-q", bare, "reqdrive/x"], cwd=source, check=True)
        double.pulls[(REPO, 2)] = {"title": "X", "body": "clean", "head": {"ref": "reqdrive/x"}}

        with pytest.raises(AssertionError, match="commits"):
            assert_no_secrets(double)
