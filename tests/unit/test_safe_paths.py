"""A folder the agent could write is walked by the worker without following any link it made."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from worker.confine.safe_paths import (
    LinkError,
    copy_out,
    empty_folder,
    fresh_folder,
    open_under,
    remove_tree,
    remove_under,
)


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """A folder of the worker's machine holding a file the agent must never reach."""
    folder = tmp_path / "host"
    folder.mkdir()
    (folder / "marker").write_text("the worker's own")
    return folder


@pytest.fixture
def home(tmp_path: Path, host: Path) -> Path:
    """An agent-writable folder whose `tmp` the agent replaced with a link to the host."""
    folder = tmp_path / "home"
    folder.mkdir()
    (folder / "tmp").symlink_to(host)
    return folder


def test_nothing_is_removed_at_the_end_of_a_link_on_the_way(home: Path, host: Path) -> None:
    with pytest.raises(LinkError):
        remove_under(home, "tmp/marker")
    assert (host / "marker").exists()


def test_a_link_itself_is_removed_never_what_it_names(home: Path, host: Path) -> None:
    assert remove_under(home, "tmp")
    assert not (home / "tmp").is_symlink() and (host / "marker").exists()


def test_a_file_behind_a_link_is_neither_opened_nor_copied(
    home: Path, host: Path, tmp_path: Path
) -> None:
    with pytest.raises(LinkError):
        open_under(home, "tmp/marker")
    assert not copy_out(home, "tmp/marker", tmp_path / "copy")
    assert not (tmp_path / "copy").exists()
    (home / "report.xml").symlink_to(host / "marker")
    assert not copy_out(home, "report.xml", tmp_path / "copy")


def test_a_plain_file_is_copied_out(home: Path, tmp_path: Path) -> None:
    (home / "real").mkdir()
    (home / "real" / "report.xml").write_text("<testsuite/>")
    assert copy_out(home, "real/report.xml", tmp_path / "copy")
    assert (tmp_path / "copy").read_text() == "<testsuite/>"


def test_a_fifo_is_not_waited_on(home: Path, tmp_path: Path) -> None:
    os.mkfifo(home / "report.xml")
    assert not copy_out(home, "report.xml", tmp_path / "copy")


def test_a_fresh_folder_replaces_a_link_and_keeps_the_host_folder(home: Path, host: Path) -> None:
    made = fresh_folder(home, "tmp")
    assert made.is_dir() and not made.is_symlink() and not list(made.iterdir())
    assert (host / "marker").exists()
    (home / "tmp2").symlink_to(host)
    with pytest.raises(LinkError):
        fresh_folder(home, "tmp2/inner")
    assert not (host / "inner").exists()


def test_emptying_a_folder_removes_links_not_their_targets(home: Path, host: Path) -> None:
    (home / "full").mkdir()
    (home / "full" / "file").write_text("x")
    empty_folder(home)
    assert list(home.iterdir()) == [] and (host / "marker").exists()


def test_a_tree_the_agent_closed_to_its_owner_or_nested_deep_is_removed(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    deep = tree.joinpath(*["d"] * 400)
    deep.mkdir(parents=True)
    (tree / "closed").mkdir()
    (tree / "closed" / "file").write_text("x")
    (tree / "closed").chmod(0)
    remove_tree(tree)
    assert not tree.exists()


def test_removing_what_is_not_there_is_fine(tmp_path: Path) -> None:
    remove_tree(tmp_path / "missing")
    assert not remove_under(tmp_path, "missing/inside")


def test_a_kept_folder_stays_as_it_is_and_a_dangling_link_becomes_one(home: Path) -> None:
    (home / "cache").mkdir()
    (home / "cache" / "kept").write_text("x")
    assert (fresh_folder(home, "cache", empty=False) / "kept").exists()
    (home / "gone").symlink_to(home / "nowhere")
    made = fresh_folder(home, "gone", empty=False)
    assert made.is_dir() and not made.is_symlink() and not (home / "nowhere").exists()
