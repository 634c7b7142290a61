"""worker/run/setup.py's relocation: a restored venv names the worktree it is restored into."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from worker.run.setup import ORIGIN, relocate

OLD = "/work/cache/worktrees/run-1"


def saved_entry(tmp_path: Path) -> Path:
    saved = tmp_path / "setup-cache" / "key"
    saved.mkdir(parents=True)
    (saved / ORIGIN).write_text(OLD)
    return saved


def test_scripts_links_and_read_only_files_get_the_new_worktrees_path(tmp_path: Path) -> None:
    worktree = tmp_path / "run-2"
    bin_dir = worktree / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    pip = bin_dir / "pip"
    pip.write_text(f"#!{OLD}/.venv/bin/python\nimport pip\n")
    pip.chmod(0o555)
    (worktree / ".venv" / "src-link").symlink_to(f"{OLD}/src")
    (worktree / ".venv" / "lib-link").symlink_to("bin")  # relative: left as it is

    relocate(saved_entry(tmp_path), worktree, [".venv"])

    assert pip.read_text() == f"#!{worktree}/.venv/bin/python\nimport pip\n"
    assert stat.S_IMODE(pip.stat().st_mode) == 0o555
    assert os.readlink(worktree / ".venv" / "src-link") == f"{worktree}/src"
    assert os.readlink(worktree / ".venv" / "lib-link") == "bin"


def test_a_binary_file_is_left_as_it_is(tmp_path: Path) -> None:
    # A .pyc holds its source's path with the string's length beside it: replacing the path
    # by one of another length would break it ("bad marshal data").
    worktree = tmp_path / "run-2"
    cached = worktree / ".venv" / "__pycache__" / "pip.cpython-311.pyc"
    cached.parent.mkdir(parents=True)
    data = b"\xa7\r\r\n\0\0\0\0" + len(OLD).to_bytes(4, "little") + OLD.encode()
    cached.write_bytes(data)

    relocate(saved_entry(tmp_path), worktree, [".venv"])

    assert cached.read_bytes() == data


def test_an_entry_saved_without_its_origin_is_restored_as_it_was(tmp_path: Path) -> None:
    worktree = tmp_path / "run-2"
    (worktree / ".venv").mkdir(parents=True)
    script = worktree / ".venv" / "tool"
    script.write_text(f"#!{OLD}/python\n")
    saved = tmp_path / "setup-cache" / "old-key"
    saved.mkdir(parents=True)

    relocate(saved, worktree, [".venv"])

    assert script.read_text() == f"#!{OLD}/python\n"
