"""What an agent leaves in its folders loses every privilege bit, and no special file stays."""

from __future__ import annotations

import os
import shutil
import socket
import stat
from pathlib import Path

from worker.confine.leftovers import sweep


def test_setuid_and_setgid_bits_are_cleared_everywhere_below(tmp_path: Path) -> None:
    shell = tmp_path / "deep" / "down" / "sh"
    shell.parent.mkdir(parents=True)
    shutil.copy("/bin/sh", shell)
    shell.chmod(0o6755)
    tmp_path.joinpath("deep").chmod(0o2755)
    found = sweep([tmp_path])
    assert stat.S_IMODE(shell.stat().st_mode) == 0o755
    assert not tmp_path.joinpath("deep").stat().st_mode & stat.S_ISGID
    assert found.unprivileged == ["deep", "deep/down/sh"]
    assert "cleared setuid/setgid bits: deep, deep/down/sh" in (found.note() or "")


def test_fifos_and_sockets_are_removed_and_named(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(tmp_path / "agent.sock"))
    (tmp_path / "kept.txt").write_text("x")
    found = sweep([tmp_path])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt"]
    assert sorted(found.refused) == ["agent.sock (socket)", "pipe (FIFO)"]


def test_a_link_is_never_followed_to_the_file_it_names(tmp_path: Path) -> None:
    host = tmp_path / "host-tool"
    shutil.copy("/bin/sh", host)
    host.chmod(0o4755)  # the host's own setuid file, which the sweep must not touch
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "tool").symlink_to(host)
    (agent / "folder").symlink_to(tmp_path)
    found = sweep([agent])
    assert host.stat().st_mode & stat.S_ISUID
    assert found.note() is None


def test_a_folder_closed_to_its_owner_is_opened_and_swept(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    closed.mkdir()
    os.mkfifo(closed / "pipe")
    closed.chmod(0)
    found = sweep([tmp_path])
    assert found.refused == ["closed/pipe (FIFO)"]
    assert stat.S_IMODE(closed.stat().st_mode) == 0o700


def test_a_name_the_agent_chose_is_shown_with_its_control_characters_escaped(
    tmp_path: Path,
) -> None:
    os.mkfifo(tmp_path / "a\x1b]0;owned\x07")
    note = sweep([tmp_path]).note() or ""
    assert "a\\x1b]0;owned\\x07 (FIFO)" in note
    assert not [c for c in note if ord(c) < 32]
