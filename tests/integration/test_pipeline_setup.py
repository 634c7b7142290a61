"""The repository's `setup` in the sandbox: the checks import the worktree, or the run stops."""

from __future__ import annotations

import json
import shutil
import sysconfig
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_pipeline import (
    MakeProject,
    Project,
    git,
    implement,
    prd,
    project_factory,
)
from worker.confine.limits import DEFAULT_LIMITS
from worker.confine.sandbox import Sandbox
from worker.exceptions import SetupFailed
from worker.local.exit_codes import ExitCode, exit_code_for
from worker.model.state import StoryState

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

SUPPORT = Path(__file__).resolve().parents[1] / "support"
SUITE_SITE = sysconfig.get_paths()["purelib"]
# A `src/` project's setup as `pip install -e .` makes it, without the network: a venv whose
# site-packages point at the worktree's `src` (and at this suite's pytest). It says when it
# makes the venv, so a run that found it restored from the cache says nothing.
SETUP_SH = f"""set -e
[ -d .venv ] || {{ echo "creating the venv"; python3 -m venv --without-pip .venv; }}
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$PWD/src" > "$site/demo.pth"
echo "{SUITE_SITE}" > "$site/suite.pth"
"""
FILES = {
    "pyproject.toml": '[project]\nname = "demo"\nversion = "0.1"\n',
    "src/demo/__init__.py": "def value():\n    return 1\n",
    "setup.sh": SETUP_SH,
    "tests/test_base.py": "import demo\n\n\ndef test_base():\n    assert demo.value() == 1\n",
}
CONFIG = {
    "setup": "bash setup.sh",
    "testCommand": ".venv/bin/python -m pytest -q -p no:cacheprovider",
}


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def scenario(agent_io: Path, data: dict[str, Any]) -> Path:
    data["calls_log"] = str(agent_io / "calls.log")
    path = agent_io / "scenario.json"
    path.write_text(json.dumps(data))
    return path


def progress(project: Project, run_id: str) -> str:
    return (project.run_dir(run_id) / "progress.txt").read_text()


def test_the_checks_import_the_worktrees_package_and_the_second_run_starts_from_the_cache(
    make_project: MakeProject, sandbox: Sandbox, agent_io: Path
) -> None:
    project = make_project(CONFIG, files=FILES)
    story = scenario(agent_io, {"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    first = project.run(story, sandbox=sandbox)

    assert [g.passed for g in first.baseline_gates] == [True]  # `import demo` found src/
    assert first.stories[0].state is StoryState.PASSED and first.ready
    assert "creating the venv" in (project.run_dir("run-1") / "setup.log").read_text()
    said = project.console.getvalue()  # a line when it starts and one when it ends
    assert "setup: running setup (bash setup.sh)" in said and "setup: setup passed (" in said
    assert "setup cached" not in progress(project, "run-1")
    # The venv is no story's change, though the repository's .gitignore does not name it.
    assert not [f for f in project.branch_files() if f.startswith(".venv")]

    second = project.run(story, sandbox=sandbox, run_id="run-2", plan_only=True)

    assert [g.passed for g in second.baseline_gates] == [True]
    assert "setup cached: .venv restored" in progress(project, "run-2")
    assert "creating the venv" not in (project.run_dir("run-2") / "setup.log").read_text()
    # Kept out of git once, however many runs: the mirror's info/exclude names it one time.
    [exclude] = project.work_dir.glob("cache/**/info/exclude")
    assert exclude.read_text().splitlines().count("/.venv") == 1


def test_a_changed_lockfile_is_not_served_the_old_cache(
    make_project: MakeProject, sandbox: Sandbox, agent_io: Path
) -> None:
    project = make_project(CONFIG, files=FILES)
    story = scenario(agent_io, {"plan": [{"prd": prd(1)}]})
    project.run(story, sandbox=sandbox, plan_only=True)
    source = project.tmp / "source"
    (source / "pyproject.toml").write_text(FILES["pyproject.toml"] + "# a new dependency\n")
    git(source, "commit", "-qam", "deps")
    git(source, "push", "-q", str(project.remote), "main")

    project.run(story, sandbox=sandbox, run_id="run-2", plan_only=True)

    assert "setup cached" not in progress(project, "run-2")
    assert "creating the venv" in (project.run_dir("run-2") / "setup.log").read_text()


def test_a_failing_setup_stops_the_run_at_the_baseline_with_its_exit_code_and_output(
    make_project: MakeProject, sandbox: Sandbox, agent_io: Path
) -> None:
    failing = {**CONFIG, "setup": "echo 'no matching distribution for demo-dep' >&2; exit 3"}
    project = make_project(failing, files=FILES)
    story = scenario(agent_io, {"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    with pytest.raises(SetupFailed) as stopped:
        project.run(story, sandbox=sandbox)

    message = str(stopped.value)
    assert "(exit 3)" in message and "no matching distribution for demo-dep" in message
    assert exit_code_for(stopped.value) is ExitCode.PREFLIGHT_FAILED
    assert not (agent_io / "calls.log").exists()  # no plan, no story: nothing was judged
    assert "setup FAILED (exit 3)" in project.console.getvalue()
    assert not (project.run_dir() / "baseline.gates.json").exists()


def test_a_folder_the_setup_made_a_link_is_never_saved_through_it(
    make_project: MakeProject, sandbox: Sandbox, agent_io: Path
) -> None:
    # `.venv` made a link to the host's /usr: saving it would copy what it names.
    project = make_project({"setup": "ln -sfn /usr .venv"}, files=FILES)
    story = scenario(agent_io, {"plan": [{"prd": prd(1)}]})
    project.run(story, sandbox=sandbox, plan_only=True)
    project.run(story, sandbox=sandbox, run_id="run-2", plan_only=True)

    assert "setup cached" not in progress(project, "run-2")
    assert list((project.work_dir / "setup-cache").glob("*")) == []


def test_a_setup_over_the_disk_quota_stops_the_run(
    make_project: MakeProject, sandbox: Sandbox, agent_io: Path
) -> None:
    filling = "mkdir -p .venv && head -c 3145728 /dev/urandom > .venv/blob"
    project = make_project({"setup": filling}, files=FILES)
    story = scenario(agent_io, {"plan": [{"prd": prd(1)}]})
    limits = replace(DEFAULT_LIMITS, disk_quota_mib=2)
    with pytest.raises(SetupFailed) as stopped:
        project.run(story, sandbox=sandbox, limits=limits)

    assert "took more than 2 MiB (REQDRIVE_DISK_QUOTA_MIB)" in str(stopped.value)
    assert not (agent_io / "calls.log").exists()
    assert list((project.work_dir / "setup-cache").glob("*")) == []


def test_a_venv_made_without_a_known_lockfile_is_kept_for_the_checks_but_not_cached(
    make_project: MakeProject, sandbox: Sandbox, agent_io: Path
) -> None:
    files = {**FILES, "pyproject.toml": None, "setup.cfg": "[metadata]\nname = demo\n"}
    project = make_project(CONFIG, files=files)
    story = scenario(agent_io, {"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    result = project.run(story, sandbox=sandbox)

    assert result.stories[0].state is StoryState.PASSED  # the checks after it found .venv
    assert not [f for f in project.branch_files() if f.startswith(".venv")]
    assert not (project.work_dir / "setup-cache").exists()


def test_a_resumed_run_whose_worktree_holds_the_agents_commits_never_saves_the_cache(
    make_project: MakeProject, sandbox: Sandbox, agent_io: Path
) -> None:
    # The agent's committed code runs in a resumed run's setup: what that setup makes must not
    # reach a later run's checks under the base's key.
    project = make_project(CONFIG, files=FILES)
    story = scenario(
        agent_io,
        {"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1), implement(1)]}},
    )
    first = project.run(story, sandbox=sandbox)
    assert first.stories[0].state is StoryState.PASSED
    cache = project.work_dir / "setup-cache"
    assert list(cache.glob("*"))  # saved once, from the base commit
    shutil.rmtree(cache)

    again = project.run(story, sandbox=sandbox, retry=("US-001",))

    assert again.stories[0].state is StoryState.PASSED
    assert "creating the venv" in (project.run_dir("run-1") / "setup.log").read_text()
    assert not cache.exists() or list(cache.glob("*")) == []


def test_a_restored_venvs_scripts_start_in_another_runs_worktree(
    make_project: MakeProject, sandbox: Sandbox, agent_io: Path
) -> None:
    # What `python3 -m venv .venv && .venv/bin/pip install ...` meets on a second run id: the
    # restored .venv's console scripts start the python of the worktree they were made in.
    made_once = (
        "[ -d .venv ] || python3 -m venv --without-pip .venv\n"
        "[ -e .venv/bin/tool ] || { printf '#!%s/.venv/bin/python\\nprint(\"tool ran\")\\n' "
        '"$PWD" > .venv/bin/tool; chmod 555 .venv/bin/tool; }\n'
        ".venv/bin/tool\n"
    )
    project = make_project(
        {"setup": "bash made_once.sh"}, files={**FILES, "made_once.sh": made_once}
    )
    story = scenario(agent_io, {"plan": [{"prd": prd(1)}]})
    project.run(story, sandbox=sandbox, plan_only=True)

    project.run(story, sandbox=sandbox, run_id="run-2", plan_only=True)

    assert "setup cached: .venv restored" in progress(project, "run-2")
    assert "tool ran" in (project.run_dir("run-2") / "setup.log").read_text()


def test_the_setups_folders_are_neither_the_calls_disk_nor_removed_with_its_files(
    make_project: MakeProject, sandbox: Sandbox, agent_io: Path
) -> None:
    # The setup's venv takes most of the quota: it is the host's, not a call's.
    filling = "bash setup.sh && head -c 1572864 /dev/urandom > .venv/blob"
    project = make_project({**CONFIG, "setup": filling, "maxStoryRetries": 2}, files=FILES)
    over = {"write": {**implement(1)["write"], "notes.bin": "x" * (3 << 20)}}
    under = {"write": {**implement(1)["write"], "notes.bin": "x" * (1 << 20)}}
    story = scenario(agent_io, {"plan": [{"prd": prd(1)}], "stories": {"US-001": [over, under]}})
    limits = replace(DEFAULT_LIMITS, disk_quota_mib=2)
    result = project.run(story, sandbox=sandbox, limits=limits)

    first, second = result.stories[0].attempts
    assert "REQDRIVE_DISK_QUOTA_MIB" in first.reason
    # Its files went, the venv stayed: the next attempt's checks ran with it, and its own
    # megabyte is under the quota that the venv alone nearly fills.
    assert second.outcome.value == "passed", second.reason
    assert result.stories[0].state is StoryState.PASSED
