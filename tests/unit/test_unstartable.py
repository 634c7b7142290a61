"""Checks that cannot start, told from checks that fail, on what real shells and runners print."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.pytest_command import QUIET_PLUGINS
from worker.model.gates import GateResult, TestStatus
from worker.verdict.unstartable import GatePlace, cannot_start

SYSTEM_PATH = "/usr/bin:/bin"


def gate(command: str, cwd: Path, path: str = SYSTEM_PATH) -> GateResult:
    """The gate's command run as run_gate runs it (bash -c), its output as the gate keeps it."""
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env={"PATH": path, "HOME": str(cwd)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return GateResult(
        name="tests",
        command=command,
        passed=done.returncode == 0,
        exit_code=done.returncode,
        timed_out=False,
        duration_s=0.1,
        output_tail=done.stdout + done.stderr,
    )


def place(path: str = SYSTEM_PATH, *, sandboxed: bool = True) -> GatePlace:
    return GatePlace(sandboxed=sandboxed, gate_path=path, worker_path=path, keep_out=[])


def test_a_program_found_nowhere_names_it_and_the_install(tmp_path: Path) -> None:
    why = cannot_start(gate("no-such-tool-xyz -q", tmp_path), place())
    assert why is not None
    assert why.missing.startswith("`no-such-tool-xyz`: command not found")
    assert why.fix.startswith("install no-such-tool-xyz")


def test_a_program_the_sandbox_cannot_see_names_the_folder_to_show(tmp_path: Path) -> None:
    tools = tmp_path / "opt" / "bin"
    tools.mkdir(parents=True)
    (tools / "runner").write_text("#!/bin/sh\nexit 0\n")
    (tools / "runner").chmod(0o755)
    # As in a sandbox that does not show `tools`: the gate's PATH names it, bash finds nothing.
    result = gate("runner", tmp_path, path=f"{tmp_path}/hidden:{SYSTEM_PATH}")
    why = cannot_start(result, place(f"{tools}:{SYSTEM_PATH}"))
    assert why is not None and f"add {tools} to REQDRIVE_SANDBOX_READONLY" in why.fix


def test_a_repository_script_that_is_not_executable_says_chmod(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "test.sh").write_text("#!/bin/sh\nexit 0\n")
    why = cannot_start(gate("scripts/test.sh", tmp_path), place())
    assert why is not None and "git update-index --chmod=+x scripts/test.sh" in why.fix


@pytest.mark.parametrize("module", ["no_such_runner_xyz", "no_such_pkg_xyz.runner"])
def test_a_missing_runner_module_names_its_install(tmp_path: Path, module: str) -> None:
    why = cannot_start(gate(f"{sys.executable} -m {module} -q", tmp_path), place())
    assert why is not None and "has no module" in why.missing
    assert f"-m pip install {module.split('.')[0]}`" in why.fix


def test_a_test_failing_on_a_missing_import_is_not_a_missing_runner(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text("import no_such_module_xyz\n")
    result = gate(
        f"{sys.executable} -m pytest -q {QUIET_PLUGINS} test_x.py",
        tmp_path,
    )
    assert not result.passed and "No module named 'no_such_module_xyz'" in result.output_tail
    assert cannot_start(result, place()) is None


def test_a_gate_that_reported_tests_started_whatever_its_exit_code(tmp_path: Path) -> None:
    result = gate("echo 'bash: line 1: helper: command not found'; exit 127", tmp_path)
    started = result.model_copy(update={"tests": {"t::a": TestStatus.FAILED}})
    assert cannot_start(result, place()) is not None
    assert cannot_start(started, place()) is None


@pytest.mark.skipif(shutil.which("node") is None, reason="node not installed")
def test_a_missing_node_runner_says_npm_ci(tmp_path: Path) -> None:
    why = cannot_start(gate("node node_modules/vitest/vitest.mjs run", tmp_path), place())
    assert why is not None and "Node module vitest" in why.missing and "npm ci" in why.fix


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm not installed")
def test_npm_test_whose_script_is_not_installed_says_npm_ci(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text('{"name": "x", "scripts": {"test": "vitest run"}}')
    why = cannot_start(gate("npm test", tmp_path), place())
    assert why is not None and "`vitest`: command not found" in why.missing
    assert "npm ci" in why.fix


@pytest.mark.skipif(shutil.which("npx") is None, reason="npm not installed")
def test_npx_without_the_runner_in_node_modules_is_said_with_the_setup_fix(
    tmp_path: Path,
) -> None:
    # The checks run with npm_config_yes=false (run/calls.py): npx looks the package up and
    # refuses to download it; with no registry to ask, the lookup itself fails.
    (tmp_path / "package.json").write_text('{"devDependencies": {"vitest": "^1.6.0"}}')
    offline = (
        "npm_config_yes=false npm_config_fetch_retries=0 npm_config_registry=http://127.0.0.1:9/"
    )
    why = cannot_start(gate(f"{offline} npx vitest run", tmp_path), place())
    assert why is not None
    assert why.missing == "npx found no vitest in the worktree's node_modules and would download it"
    assert "`setup: npm ci` in .github/reqdrive.yml" in why.fix


def test_npx_refusing_to_download_names_the_package_without_its_version(tmp_path: Path) -> None:
    # npm 11's words when the registry answered and npm_config_yes=false refused the install.
    output = (
        'npm error npx canceled due to missing packages and no YES option: ["@scope/cli@4.1.12"]\n'
        "npm error A complete log of this run can be found in: /home/.npm/_logs/x.log\n"
    )
    result = GateResult(
        name="tests",
        command="npx @scope/cli run",
        passed=False,
        exit_code=1,
        timed_out=False,
        duration_s=0.1,
        output_tail=output,
    )
    why = cannot_start(result, place())
    assert why is not None and "npx found no @scope/cli in" in why.missing
    assert "npm install --save-dev @scope/cli" in why.fix


def test_a_runner_named_by_its_node_modules_path_says_the_setup_fix(tmp_path: Path) -> None:
    why = cannot_start(gate("./node_modules/.bin/mocha test", tmp_path), place())
    assert why is not None
    assert (
        why.missing
        == "`./node_modules/.bin/mocha` does not exist: the worktree has no node_modules"
    )
    assert "`setup: npm ci` in .github/reqdrive.yml" in why.fix
    assert "npm install --save-dev mocha" in why.fix


@pytest.mark.skipif(shutil.which("npx") is None, reason="npm not installed")
def test_npx_in_the_script_npm_test_runs_is_said_too(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text('{"scripts": {"test": "npx vitest run"}}')
    offline = (
        "npm_config_yes=false npm_config_fetch_retries=0 npm_config_registry=http://127.0.0.1:9/"
    )
    why = cannot_start(gate(f"{offline} npm test", tmp_path), place())
    assert why is not None
    assert why.missing == "npx found no vitest in the worktree's node_modules and would download it"
