"""A gate's report path that leads out of the worktree through a link the agent made: the
worker neither deletes nor reads what is at its end."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from worker.confine.redact import Redactor
from worker.confine.sandbox import SandboxMode, make_sandbox
from worker.model.gates import GateSpec
from worker.verdict.gates import run_gate

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

PASSING_REPORT = (
    '<testsuite name="x"><testcase classname="outside" name="test_forged"/></testsuite>\n'
)


def test_a_report_folder_linked_out_of_the_worktree_is_neither_deleted_nor_read(
    tmp_path: Path,
) -> None:
    worktree, outside, runs = tmp_path / "worktree", tmp_path / "outside", tmp_path / "runs"
    for folder in (worktree, outside, runs):
        folder.mkdir()
    kept = outside / "junit.xml"  # stands for a file of the worker's: any name the config says
    kept.write_text(PASSING_REPORT)
    (worktree / "reports").symlink_to(outside)  # as a story of the agent's committed it
    sandbox = make_sandbox(SandboxMode.ON)
    assert sandbox is not None
    home = tmp_path / "home"
    (home / "tmp").mkdir(parents=True)
    spec = GateSpec(name="tests", command="exit 0", junit="reports/junit.xml")
    result = run_gate(
        spec,
        cwd=worktree,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(home / "tmp")},
        output_dir=runs,
        label="iteration-1",
        redactor=Redactor(),
        sandbox=sandbox.bind(writable=[home]),
    )

    assert kept.read_text() == PASSING_REPORT
    assert result.tests is None  # no per-test results: the report is not this gate's
    assert "outside::test_forged" not in (result.tests or {})
