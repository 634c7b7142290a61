"""The run folder's lock: one process per run, and no lock file left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.confine.redact import Redactor
from worker.exceptions import PreflightError
from worker.report.run_folder import LOCK_FILE, RunFolder


def test_a_held_run_refuses_a_second_holder_and_leaves_no_lock_file(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "run-1", Redactor([]))
    with folder.lock():
        assert (folder.path / LOCK_FILE).exists()
        with (
            pytest.raises(PreflightError, match="run run-1 is already running"),
            RunFolder(folder.path, Redactor([])).lock(),
        ):
            pass
    assert not (folder.path / LOCK_FILE).exists()
    with folder.lock():  # free again
        pass
    assert sorted(p.name for p in folder.path.iterdir()) == []
