"""A change of 20,000 files is scanned by a few git processes, and never past its deadline."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from worker.confine.redact import Redactor
from worker.git.runner import run_git
from worker.verdict import secret_scan
from worker.verdict.secret_scan import SecretScanner

TOKEN = "ghs_" + "Q7w9E2r4T6y8U1i3O5p7A9s2D4f6G8h0J2k4"
FILES = 20_000
# The module's fixture is made before any test's isolated git config exists.
GIT_ENV = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
IDENTITY = ["-c", "user.name=reqdrive tests", "-c", "user.email=tests@reqdrive.invalid"]


def git(cwd: Path, *args: str) -> None:
    env = {**os.environ, **GIT_ENV}
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=env)


@pytest.fixture(scope="module")
def many_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository whose staged change adds 20,000 files, one of them holding the token.
    Built once per module (per xdist worker that runs its tests): writing and staging the files
    is most of these tests' time, and a scan only reads it (its write-tree stores the tree of
    what is staged already)."""
    repo = tmp_path_factory.mktemp("many-files") / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("hello\n")
    git(repo, "add", "-A")
    git(repo, *IDENTITY, "commit", "-qm", "base")
    for n in range(FILES):
        folder = repo / "generated" / f"{n // 1000:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"module_{n:05d}.py").write_text(f"VALUE_{n} = {n}\n")
    (repo / "generated" / "07" / "module_07123.py").write_text(f"TOKEN = '{TOKEN}'\n")
    git(repo, "add", "-A")
    return repo


@pytest.fixture
def git_calls(monkeypatch: pytest.MonkeyPatch) -> list[Sequence[str]]:
    """Every git command the scan starts, through the one git runner."""
    calls: list[Sequence[str]] = []

    def counted(args: Sequence[str], **kwargs: Any) -> str:
        calls.append(args)
        return run_git(args, **kwargs)

    monkeypatch.setattr(secret_scan, "run_git", counted)
    return calls


def test_twenty_thousand_added_files_take_a_few_git_processes(
    many_files: Path, git_calls: list[Sequence[str]]
) -> None:
    findings = SecretScanner(Redactor([TOKEN])).scan_change(many_files, "HEAD")
    assert [str(f) for f in findings] == ["generated/07/module_07123.py: holds a secret (plainly)"]
    # Three per file before (ls-files, cat-file -s, cat-file blob): 60,001 processes.
    assert len(git_calls) <= 3 + FILES // secret_scan.BATCH_BLOBS + 1


def test_a_change_not_scanned_in_time_is_refused(
    many_files: Path, git_calls: list[Sequence[str]]
) -> None:
    findings = SecretScanner(Redactor([TOKEN]), deadline_s=1e-6).scan_change(many_files, "HEAD")
    assert [str(f) for f in findings] == [
        "the change: could not be scanned in time (the limit is 1e-06s, set by "
        "REQDRIVE_SCAN_DEADLINE_S)"
    ]
    assert len(git_calls) <= 1
