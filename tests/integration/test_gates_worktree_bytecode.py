"""A run's checks share the worker's own bytecode of the worktree's modules: compiled by the
worker from the sources, hash-checked at every import, never taken from what a check wrote."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from tests.integration.test_gates_bytecode_seed import gates as checks
from worker.confine import worktree_bytecode
from worker.confine.bytecode_seed import SUFFIX
from worker.confine.worktree_bytecode import MAX_SOURCE_BYTES, TREE, WorktreeBytecode, key_of
from worker.model.gates import GateResult

ENV = {"PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin"}
# Python says where it loaded a module's code from (-v): "code object from '<pyc>'" when it
# used bytecode, "matches <source>" when it found the bytecode current.
IMPORT = "python -v -c 'import feature, sys; sys.exit(feature.VALUE)' 2>&1"


def gates(tmp_path: Path, own: WorktreeBytecode, *commands: str) -> list[GateResult]:
    return checks(tmp_path, None, *commands, own_bytecode=own)


def kept(own: WorktreeBytecode, source: Path) -> Path:
    """The run's compiled file of the source as it is now."""
    real = Path(os.path.realpath(source))
    return own.folder / TREE / f"{key_of(real, source.read_bytes())}{SUFFIX}"


def kept_files(own: WorktreeBytecode) -> list[Path]:
    return sorted((own.folder / TREE).glob("*.pyc"))


def loaded_from_seed(result: GateResult) -> bool:
    lines = [line for line in result.output_tail.splitlines() if "feature" in line]
    return any("code object from" in line and "/pycache/" in line for line in lines)


def worktree(tmp_path: Path, text: str) -> Path:
    (tmp_path / "worktree").mkdir(exist_ok=True)
    source = tmp_path / "worktree" / "feature.py"
    source.write_text(text)
    return source


def test_a_worktree_module_a_check_compiled_is_kept_and_the_next_check_loads_it(
    tmp_path: Path,
) -> None:
    source = worktree(tmp_path, "VALUE = 0\n")
    own = WorktreeBytecode(tmp_path / "bytecode")
    (first,) = gates(tmp_path, own, IMPORT)
    assert first.passed and not loaded_from_seed(first)
    assert kept(own, source).read_bytes()[4:8] == (3).to_bytes(4, "little")  # checked hash
    (second,) = gates(tmp_path, own, IMPORT)
    assert second.passed and loaded_from_seed(second), second.output_tail


def test_a_source_changed_with_its_time_and_size_kept_runs_as_changed(tmp_path: Path) -> None:
    source = worktree(tmp_path, "VALUE = 0\n")
    own = WorktreeBytecode(tmp_path / "bytecode")
    gates(tmp_path, own, IMPORT)
    before = os.stat(source)
    source.write_text("VALUE = 7\n")  # the same size
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    (changed,) = gates(tmp_path, own, IMPORT)
    # The kept bytecode stood for the old source: Python compiled the new one, and ran it.
    assert changed.exit_code == 7, changed.output_tail
    assert not loaded_from_seed(changed)
    (again,) = gates(tmp_path, own, IMPORT)  # and the worker kept the new one
    assert again.exit_code == 7 and loaded_from_seed(again), again.output_tail


def test_a_source_whose_short_hash_matches_other_bytecode_runs_as_it_is(tmp_path: Path) -> None:
    # Python checks a hash-checked pyc by a 64-bit hash with a public key: an agent can make
    # two sources with one hash. Here the kept bytecode is made to claim the new source's
    # hash, as such a pair would; the worker lays in only what matches by SHA-256.
    source = worktree(tmp_path, "VALUE = 0\n")
    own = WorktreeBytecode(tmp_path / "bytecode")
    gates(tmp_path, own, IMPORT)
    first = kept(own, source)
    source.write_text("VALUE = 7\n")
    data = bytearray(first.read_bytes())
    data[8:16] = importlib.util.source_hash(source.read_bytes())
    first.write_bytes(bytes(data))
    (changed,) = gates(tmp_path, own, IMPORT)
    assert changed.exit_code == 7, changed.output_tail
    assert not loaded_from_seed(changed)


def test_bytecode_a_check_forges_for_a_worktree_module_never_reaches_the_next(
    tmp_path: Path,
) -> None:
    source = worktree(tmp_path, "VALUE = 0\n")
    forged = tmp_path / "forged.py"
    forged.write_text("VALUE = 9\n")
    # Run by a check: bytecode of another source where this check's Python keeps the
    # module's, stamped as a plain timestamp pyc of the real source would be.
    forge = (
        "import importlib.util, os, py_compile\n"
        f"target = importlib.util.cache_from_source({str(source)!r})\n"
        f"py_compile.compile({str(forged)!r}, cfile=target, doraise=True)\n"
        f"st = os.stat({str(source)!r})\n"
        "data = bytearray(open(target, 'rb').read())\n"
        "data[8:16] = (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, 'little')"
        " + (st.st_size & 0xFFFFFFFF).to_bytes(4, 'little')\n"
        "open(target, 'wb').write(bytes(data))\n"
    )
    own = WorktreeBytecode(tmp_path / "bytecode")
    forge_run, check = gates(tmp_path, own, f"python -c {shlex.quote(forge)}", IMPORT)
    assert forge_run.passed and check.exit_code == 0, check.output_tail
    (again,) = gates(tmp_path, own, IMPORT)
    assert again.exit_code == 0 and loaded_from_seed(again), again.output_tail


def test_only_plain_files_of_the_worktree_are_ever_read(tmp_path: Path) -> None:
    (tmp_path / "worktree").mkdir()
    secret = tmp_path / "secret.py"  # outside the worktree: the check can't be given it
    secret.write_text("TOKEN = 'ghs_secret'\nVALUE = 0\n")
    secret.chmod(0o600)
    linked = tmp_path / "worktree" / "linked.py"
    linked.symlink_to(secret)
    hard = tmp_path / "worktree" / "hard.py"
    os.link(secret, hard)
    big = tmp_path / "worktree" / "big.py"
    big.write_text("VALUE = 0\n" + "#" * MAX_SOURCE_BYTES)
    own = WorktreeBytecode(tmp_path / "bytecode")
    imports = "python -c 'import linked, hard, big'"
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "inner.py").write_text("TOKEN = 'ghs_other'\n")
    (tmp_path / "worktree" / "pkg").symlink_to(tmp_path / "outside")  # a folder on the way
    (result,) = gates(tmp_path, own, imports + " && python -c 'import pkg.inner'")
    assert result.passed, result.output_tail
    assert kept_files(own) == []


def test_a_source_that_breaks_the_compiler_costs_only_its_own_bytecode(tmp_path: Path) -> None:
    source = worktree(tmp_path, "VALUE = 0\n")
    nested = tmp_path / "worktree" / "nested.py"
    nested.write_text("x = " + "-" * 200_000 + "1\n")
    own = WorktreeBytecode(tmp_path / "bytecode")
    # The check's own Python gives up on the nested module; the worker's compiler too.
    (result,) = gates(tmp_path, own, f"python -c 'import nested' ; {IMPORT}")
    assert result.passed, result.output_tail
    assert kept(own, source).is_file()
    assert not kept(own, nested).exists()


def test_a_source_the_worker_could_not_compile_is_not_tried_again_in_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worktree(tmp_path, "VALUE = 0\n")
    # A compiler that gives up on everything, as it would on a source made to exhaust it.
    monkeypatch.setattr(worktree_bytecode, "COMPILER", "import sys; sys.stdin.read()")
    own = WorktreeBytecode(tmp_path / "bytecode")
    gates(tmp_path, own, IMPORT)
    manifest = json.loads((own.folder / worktree_bytecode.MANIFEST).read_text())
    assert len(manifest["failed"]) == 1 and kept_files(own) == []
    gates(tmp_path, own, IMPORT)
    assert json.loads((own.folder / worktree_bytecode.MANIFEST).read_text()) == manifest


def test_what_one_check_may_have_compiled_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "worktree").mkdir()
    for n in range(5):
        (tmp_path / "worktree" / f"m{n}.py").write_text(f"VALUE = {n}\n")
    monkeypatch.setattr(worktree_bytecode, "MAX_LEARN_MODULES", 2)
    own = WorktreeBytecode(tmp_path / "bytecode")
    imports = "python -c 'import m0, m1, m2, m3, m4'"
    gates(tmp_path, own, imports)
    assert len(kept_files(own)) == 2
    monkeypatch.setattr(worktree_bytecode, "MAX_LEARN_MODULES", 100)
    monkeypatch.setattr(worktree_bytecode, "MAX_RUN_BYTES", 2 * len("VALUE = 0\n") + 3)
    gates(tmp_path, own, imports)  # the run's bytes are spent: nothing more is compiled
    assert len(kept_files(own)) == 2


def test_a_check_that_makes_its_pycache_folder_a_link_gets_nothing_read(tmp_path: Path) -> None:
    worktree(tmp_path, "VALUE = 0\n")
    (tmp_path / "elsewhere" / str(tmp_path / "worktree").lstrip("/")).mkdir(parents=True)
    # Bytecode names for the worktree's module, in a folder the check points its own at.
    planted = tmp_path / "elsewhere" / str(tmp_path / "worktree").lstrip("/")
    (planted / f"feature{SUFFIX}").write_bytes(b"")
    own = WorktreeBytecode(tmp_path / "bytecode")
    swap = f'rm -rf "$PYTHONPYCACHEPREFIX" && ln -s {tmp_path / "elsewhere"} "$PYTHONPYCACHEPREFIX"'
    (result,) = gates(tmp_path, own, swap)
    assert result.passed, result.output_tail
    assert kept_files(own) == []


def test_a_module_linked_from_a_cache_everyone_may_read_is_kept(tmp_path: Path) -> None:
    # uv links a .venv's files to its cache: two names, one file, readable by everyone.
    (tmp_path / "cache").mkdir()
    cached = tmp_path / "cache" / "feature.py"
    cached.write_text("VALUE = 0\n")
    cached.chmod(0o644)
    (tmp_path / "worktree").mkdir()
    source = tmp_path / "worktree" / "feature.py"
    os.link(cached, source)
    own = WorktreeBytecode(tmp_path / "bytecode")
    gates(tmp_path, own, IMPORT)
    assert kept(own, source).is_file()
    (second,) = gates(tmp_path, own, IMPORT)
    assert second.passed and loaded_from_seed(second), second.output_tail
