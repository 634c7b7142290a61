"""A run needs free disk to start, and a call that fills its folders past the quota fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.test_pipeline import MakeProject, implement, prd
from tests.integration.test_pipeline import make_project as make_project
from worker.confine.disk import LowDiskSpace, check_free_space, folders_size, over_quota
from worker.confine.limits import MIB, ResourceLimits
from worker.model.state import AttemptOutcome, StoryState


def test_a_run_does_not_start_without_the_free_space_it_needs(
    make_project: MakeProject,
) -> None:
    project = make_project()
    scenario = project.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    with pytest.raises(LowDiskSpace, match=r"MiB free .*set REQDRIVE_DISK_FREE_MIB lower"):
        project.run(scenario, limits=ResourceLimits(disk_free_mib=10**12))
    assert project.calls() == []  # no agent was started


def test_a_call_over_the_disk_quota_fails_its_attempt_and_its_files_go(
    make_project: MakeProject,
) -> None:
    project = make_project({"maxStoryRetries": 1})
    big = {"build/cache.bin": "x" * (3 * MIB)}  # ignored or not, it is the run's disk
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(1)}],
            "stories": {"US-001": [{"write": {**implement(1)["write"], **big}}]},
        }
    )
    result = project.run(scenario, limits=ResourceLimits(disk_quota_mib=2))
    attempt = result.stories[0].attempts[0]
    assert attempt.outcome is AttemptOutcome.NO_CHANGES
    assert "REQDRIVE_DISK_QUOTA_MIB" in attempt.reason
    assert not list(project.work_dir.rglob("cache.bin"))
    assert result.stories[0].state is StoryState.FAILED and not result.ready


def test_folder_sizes_count_blocks_once_and_follow_no_link(tmp_path: Path) -> None:
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    (outside / "big").write_bytes(os.urandom(4 * MIB))
    (inside / "link").symlink_to(outside)  # the agent's link to a host folder: not counted
    (inside / "data").write_bytes(os.urandom(MIB))
    os.link(inside / "data", inside / "same-data")  # one file, two names
    assert MIB <= folders_size([inside]) < 2 * MIB
    assert over_quota([inside], ResourceLimits(disk_quota_mib=2)) is None
    assert over_quota([inside, outside], ResourceLimits(disk_quota_mib=2)) is not None


def test_free_space_is_checked_on_the_disk_of_a_work_dir_not_made_yet(tmp_path: Path) -> None:
    check_free_space(tmp_path / "not" / "yet", ResourceLimits(disk_free_mib=1))
    with pytest.raises(LowDiskSpace, match=r"only [0-9]+ MiB free"):
        check_free_space(tmp_path / "not" / "yet", ResourceLimits(disk_free_mib=10**12))
