"""The baseline cache: entries written whole, read back exactly, unreadable ones measured again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.run_results import gate
from worker.run import baseline_cache
from worker.run.baseline_cache import BaselineCache, installed_identity

KEY = "a" * 64


def test_a_saved_baseline_is_read_back_with_the_run_that_measured_it(tmp_path: Path) -> None:
    cache = BaselineCache(tmp_path / "cache")
    gates = [gate("tests", False, ["t::a"]), gate("lint", True)]
    cache.save(KEY, gates, measured_by="run-1")
    found = cache.load(KEY)
    assert found is not None
    assert (found.gates, found.measured_by) == (gates, "run-1")
    assert cache.load("b" * 64) is None
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [f"{KEY}.json"]  # no temp file


@pytest.mark.parametrize(
    "text",
    [
        "{",  # cut short
        '{"format": 1, "key": "' + "b" * 64 + '", "measured_by": "x", "gates": []}',  # another key
        '{"format": 0, "key": "' + KEY + '", "measured_by": "x", "gates": []}',  # another format
        '{"format": 1, "key": "' + KEY + '", "measured_by": "x", "gates": [{"name": 1}]}',
        "[]",
    ],
)
def test_an_unreadable_entry_is_removed_and_measured_again(tmp_path: Path, text: str) -> None:
    cache = BaselineCache(tmp_path)
    (tmp_path / f"{KEY}.json").write_text(text)
    assert cache.load(KEY) is None
    assert not (tmp_path / f"{KEY}.json").exists()


def test_an_entry_over_the_size_cap_is_neither_saved_nor_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(baseline_cache, "ENTRY_MAX_BYTES", 100)
    cache = BaselineCache(tmp_path)
    cache.save(KEY, [gate("tests", True)], measured_by="run-1")
    assert not (tmp_path / f"{KEY}.json").exists()
    (tmp_path / f"{KEY}.json").write_text(" " * 200)
    assert cache.load(KEY) is None


def test_only_the_newest_entries_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(baseline_cache, "ENTRIES_KEPT", 2)
    cache = BaselineCache(tmp_path)
    for n, key in enumerate(("1" * 64, "2" * 64, "3" * 64)):
        cache.save(key, [gate("tests", True)], measured_by=f"run-{n}")
        os.utime(tmp_path / f"{key}.json", (1000 + n, 1000 + n))
    cache.save("4" * 64, [gate("tests", True)], measured_by="run-4")
    assert sorted(p.name[:1] for p in tmp_path.glob("*.json")) == ["3", "4"]


def _venv(worktree: Path, version: str) -> None:
    site = worktree / ".venv" / "lib" / "site-packages"
    (site / "dep.dist-info").mkdir(parents=True)
    (site / "dep.dist-info" / "METADATA").write_text(f"Name: dep\nVersion: {version}\n")
    (site / "dep.dist-info" / "RECORD").write_text(f"dep/__init__.py,sha256=x{version}\n")
    (site / "_calc.pth").write_text(f"{worktree}/src\n")  # an editable install: its path


def test_the_installed_identity_is_the_packages_records_wherever_the_worktree_is(
    tmp_path: Path,
) -> None:
    one, two, other = tmp_path / "run-1", tmp_path / "run-2", tmp_path / "run-3"
    _venv(one, "1.0")
    _venv(two, "1.0")
    _venv(other, "2.0")
    assert installed_identity(one, [".venv/"]) == installed_identity(two, [".venv/"])
    assert installed_identity(one, [".venv/"]) != installed_identity(other, [".venv/"])
    assert installed_identity(one, []) != installed_identity(one, [".venv/"])
