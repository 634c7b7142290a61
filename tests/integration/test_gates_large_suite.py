"""A real-sized pytest suite gets its per-test results: ids far beyond one record's length."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.support.pytest_command import PLAIN_PYTEST
from worker.confine.redact import Redactor
from worker.model.gates import GateSpec, TestStatus
from worker.verdict.gates import run_gate

PYTHON_BIN = str(Path(sys.executable).parent)
# 1,500 parametrized tests whose ids run to about 100 characters each: some 150 KB of ids,
# as parso's 1,351 tests make 86 KB (the plugin once wrote them on one line, which the worker
# cut at 64 KiB, so such a suite gave no per-test results at all).
SUITE = """
import pytest

CASES = [f"{n:04d}-" + "x" * 60 for n in range(1500)]

@pytest.mark.parametrize("case", CASES, ids=CASES)
def test_case(case):
    assert case
"""


def test_a_suite_whose_ids_exceed_a_record_is_read_whole(tmp_path: Path) -> None:
    repo, home = tmp_path / "repo", tmp_path / "home"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_many.py").write_text(SUITE)
    (home / "tmp").mkdir(parents=True)
    env = {
        "PATH": f"{PYTHON_BIN}:{os.environ['PATH']}",
        "HOME": str(home),
        "TMPDIR": str(home / "tmp"),
    }
    result = run_gate(
        GateSpec(name="tests", command=PLAIN_PYTEST),
        cwd=repo,
        env=env,
        output_dir=tmp_path / "out",
        label="baseline",
        redactor=Redactor(()),
    )
    assert result.no_results == "" and result.disagreements == []
    assert result.tests is not None and len(result.tests) == 1500
    assert set(result.tests.values()) == {TestStatus.PASSED}
