"""Toolchains outside /usr in the sandbox: shown to the checks, or the run stops with the fix."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_pipeline import MakeProject, Project, implement, prd, project_factory
from tests.support.pytest_command import PLAIN_PYTEST
from worker.confine.sandbox import Sandbox
from worker.exceptions import ChecksCannotStart
from worker.local.exit_codes import ExitCode, exit_code_for
from worker.model.state import RunResult, StoryState

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

SUPPORT = Path(__file__).resolve().parents[1] / "support"
SYSTEM_PATH = "/usr/bin:/bin"


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A virtual environment outside /usr whose python runs this suite's pytest."""
    folder = tmp_path / "toolchain" / "venv"
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(folder)], check=True)
    site = Path(sysconfig.get_paths(vars={"base": str(folder)})["purelib"])
    (site / "suite.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return folder


def run(project: Project, agent_io: Path, data: dict[str, Any], **extra: Any) -> RunResult:
    data.setdefault("calls_log", str(agent_io / "calls.log"))
    scenario = agent_io / "scenario.json"
    scenario.write_text(json.dumps(data))
    return project.run(scenario, **extra)


def shim(folder: Path, target: Path) -> Path:
    """A `python` on PATH that is a wrapper, as pyenv's shims are: it starts the real one
    through a launcher in a folder of its own, which no PATH names."""
    launcher = folder / "libexec" / "launch"
    launcher.parent.mkdir(parents=True)
    launcher.write_text(f'#!/bin/sh\nexec {target} "$@"\n')
    shims = folder / "shims"
    shims.mkdir()
    (shims / "python").write_text(f'#!/bin/sh\nexec {launcher} "$@"\n')
    for script in (launcher, shims / "python"):
        script.chmod(0o755)
    return shims


@needs_bwrap
@pytest.mark.parametrize("behind_shim", [False, True], ids=["venv", "shim"])
def test_a_python_outside_usr_is_shown_to_the_checks_and_the_stories_pass(
    make_project: MakeProject,
    agent_io: Path,
    sandbox: Sandbox,
    venv: Path,
    tmp_path: Path,
    behind_shim: bool,
) -> None:
    # The repository's own test proves which interpreter ran the checks.
    check = f"import sys\n\n\ndef test_env():\n    assert sys.prefix == {str(venv)!r}\n"
    project = make_project(
        {"testCommand": PLAIN_PYTEST},
        files={"tests/test_env.py": check},
    )
    first = shim(tmp_path / "manager", venv / "bin" / "python") if behind_shim else venv / "bin"
    data = {"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}}
    result = run(project, agent_io, data, sandbox=sandbox, gate_path=f"{first}:{SYSTEM_PATH}")

    assert [g.passed for g in result.baseline_gates] == [True]
    assert result.stories[0].state is StoryState.PASSED
    assert result.ready


@needs_bwrap
def test_a_check_whose_program_exists_nowhere_stops_the_run_at_the_baseline(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = make_project({"testCommand": "no-such-tool-xyz --run"})
    data = {"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}}
    with pytest.raises(ChecksCannotStart) as stopped:
        run(project, agent_io, data, sandbox=sandbox)

    message = str(stopped.value)
    assert "the tests check cannot start (`no-such-tool-xyz --run`)" in message
    assert "`no-such-tool-xyz`: command not found" in message
    assert "install no-such-tool-xyz" in message and "--gate-path" in message
    assert exit_code_for(stopped.value) is ExitCode.PREFLIGHT_FAILED
    assert not (agent_io / "calls.log").exists()  # no plan, no story attempted
    assert "no-such-tool-xyz" in project.console.getvalue()  # the reporter says why


@needs_bwrap
def test_a_program_only_on_the_workers_path_is_named_with_the_gate_path_fix(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox, tmp_path: Path
) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "runtests").write_text("#!/bin/sh\nexit 0\n")
    (tools / "runtests").chmod(0o755)
    project = make_project({"testCommand": "runtests"})
    with pytest.raises(ChecksCannotStart) as stopped:
        run(
            project,
            agent_io,
            {"plan": [{"prd": prd(1)}]},
            sandbox=sandbox,
            source_env={"PATH": f"{tools}:{SYSTEM_PATH}"},
            gate_path=SYSTEM_PATH,
        )
    assert f"only at {tools / 'runtests'}" in str(stopped.value)
    assert f"put {tools} on the checks' PATH (`--gate-path`" in str(stopped.value)


def test_a_missing_test_runner_module_stops_the_run_naming_its_install(
    make_project: MakeProject, agent_io: Path
) -> None:
    project = make_project({"testCommand": "python3 -m no_such_runner_xyz"})
    with pytest.raises(ChecksCannotStart) as stopped:
        run(project, agent_io, {"plan": [{"prd": prd(1)}]})

    message = str(stopped.value)
    assert "has no module no_such_runner_xyz" in message
    assert "-m pip install no_such_runner_xyz" in message
    assert exit_code_for(stopped.value) == 8
    assert not (agent_io / "calls.log").exists()


def test_a_test_that_fails_on_a_missing_import_is_an_ordinary_failure(
    make_project: MakeProject, agent_io: Path
) -> None:
    # The requirement's test imports what the story will write: the runner started.
    project = make_project(
        files={"tests/test_req.py": "import feature_1\n\n\ndef test_x():\n    pass\n"}
    )
    data = {"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}}
    result = run(project, agent_io, data)
    assert [g.passed for g in result.baseline_gates] == [False]
    assert [s.id for s in result.stories] == ["US-001"]  # planned and attempted
    assert (agent_io / "calls.log").read_text().count("\n") >= 2
