"""The one rule for run ids, shared by run, plan, status, logs and the workspace."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.exceptions import PreflightError
from worker.model.run_ids import check_run_id
from worker.run.spec import Requirement, RunSpec


@pytest.mark.parametrize(
    "run_id", ["demo", "req-001-export-0123456789ab", "US.1_a", "a" * 128, "9"]
)
def test_plain_ids_are_accepted(run_id: str) -> None:
    assert check_run_id(run_id) == run_id


@pytest.mark.parametrize(
    "run_id",
    ["../../x", "..", "a/b", "-rf", ".hidden", "a..b", "", "a" * 129, "demo\n", "dé", "a b"],
)
def test_ids_that_are_not_one_plain_folder_name_are_refused_naming_the_rule(run_id: str) -> None:
    with pytest.raises(PreflightError) as caught:
        check_run_id(run_id)
    assert "is not valid: use 1 to 128 ASCII letters, digits" in str(caught.value)


def test_a_run_spec_cannot_be_made_with_a_bad_run_id(tmp_path: Path) -> None:
    requirement = Requirement(text="x", source="text", slug="x")
    with pytest.raises(PreflightError, match=r"run id '\.\./\.\./x' is not valid"):
        RunSpec(run_id="../../x", requirement=requirement, remote_url="r", work_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []
