"""Which folders the checks' sandbox is shown for the programs their commands start."""

from __future__ import annotations

import sys
from pathlib import Path

from worker.confine.toolchains import command_tools, find_toolchains

SYSTEM_PATH = "/usr/bin:/bin"


def test_the_programs_a_command_starts() -> None:
    command = "if python -c 1; then FOO=1 go test ./...; fi; cd web && npx vitest | tee log"
    assert command_tools(command) == ["python", "go", "npx", "tee"]


def test_a_venv_python_is_shown_with_its_base_and_nothing_of_the_work_dir(tmp_path: Path) -> None:
    env = {"PATH": f"{Path(sys.executable).parent}:{SYSTEM_PATH}"}
    shown = find_toolchains(["python -m pytest"], env, keep_out=[tmp_path])
    assert Path(sys.prefix) in shown.folders or Path(sys.prefix).is_relative_to("/usr")
    kept_out = find_toolchains(["python -m pytest"], env, keep_out=[Path(sys.prefix)])
    assert not any(f.is_relative_to(sys.prefix) for f in kept_out.folders)


def test_a_path_in_the_command_shows_nothing_of_the_host(tmp_path: Path) -> None:
    # The repository's config names the program: only the operator's PATH decides what shows.
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "tool").write_text("#!/bin/sh\nexit 0\n")
    (secret / "tool").chmod(0o755)
    env = {"PATH": SYSTEM_PATH}
    assert find_toolchains([f"{secret}/tool"], env, keep_out=[]).folders == ()
    on_path = find_toolchains(["tool"], {"PATH": f"{secret}:{SYSTEM_PATH}"}, keep_out=[])
    assert on_path.folders == (secret,)


def test_a_folder_holding_the_workers_home_is_never_shown(tmp_path: Path) -> None:
    (tmp_path / "tool").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "tool").chmod(0o755)
    env = {"PATH": f"{tmp_path}:{SYSTEM_PATH}"}
    home = tmp_path / "home"
    assert find_toolchains(["tool"], env, keep_out=[], private=[home]).folders == ()
