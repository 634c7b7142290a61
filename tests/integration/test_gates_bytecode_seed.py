"""Each gate run's fresh pycache folder starts from the worker's own bytecode of library
modules: compiled by the worker from the sources, never taken from what a gate wrote."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from worker.confine.bytecode_seed import SUFFIX, BytecodeSeed, UnsafeSeed, check_private
from worker.confine.redact import Redactor
from worker.model.gates import GateResult, GateSpec
from worker.verdict.gates import run_gates

ENV = {"PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin"}
JSON_SOURCE = Path(json.__file__)
# Run by a gate: bytecode for the standard library's json, stamped as its source is, where
# this run's Python keeps its bytecode; its dumps() says "forged".
FORGE = (
    "import importlib.util, os, pathlib, py_compile, sys\n"
    f"source = {str(JSON_SOURCE)!r}\n"
    "target = importlib.util.cache_from_source(source)\n"
    "forged = pathlib.Path(os.environ['TMPDIR']) / 'forged.py'\n"
    "forged.write_text('def dumps(value):\\n    return \"forged\"\\n')\n"
    "py_compile.compile(str(forged), cfile=target, doraise=True)\n"
    "stat = os.stat(source)\n"
    "data = bytearray(pathlib.Path(target).read_bytes())\n"
    "data[8:16] = (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, 'little')"
    " + (stat.st_size & 0xFFFFFFFF).to_bytes(4, 'little')\n"
    "pathlib.Path(target).write_bytes(bytes(data))\n"
    "import json\n"
    "sys.exit(0 if json.dumps(1) == 'forged' else 5)\n"
)
CHECK = "python -c 'import json, sys; sys.exit(0 if json.dumps(1) == \"1\" else 3)'"


def gates(
    tmp_path: Path, seed: BytecodeSeed | None, *commands: str, **options: Any
) -> list[GateResult]:
    """The commands as one run's checks, in tmp_path/worktree, each with a HOME of its own."""
    specs = [GateSpec(name=f"g{n}", command=c) for n, c in enumerate(commands)]
    (tmp_path / "home" / "tmp").mkdir(parents=True, exist_ok=True)
    home = {"HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path / "home" / "tmp")}
    worktree = tmp_path / "worktree"
    worktree.mkdir(exist_ok=True)
    return run_gates(
        specs,
        cwd=worktree,
        env={**ENV, **home},
        output_dir=tmp_path / "out",
        label="iteration-1",
        redactor=Redactor(),
        fail_fast=False,
        seed=seed,
        **options,
    )


def seeded(seed: BytecodeSeed, source: Path) -> Path:
    return seed.folder / source.parent.relative_to("/") / f"{source.stem}{SUFFIX}"


def test_a_library_module_a_run_compiled_is_seeded_and_the_next_run_loads_it(
    tmp_path: Path,
) -> None:
    seed = BytecodeSeed(tmp_path / "seed")
    (first,) = gates(tmp_path, seed, CHECK)
    assert first.passed and seeded(seed, JSON_SOURCE).is_file()
    # Python says where it loaded a module's code from (-v).
    (second,) = gates(tmp_path, seed, "python -v -c 'import json' 2>&1")
    assert second.passed
    loaded = [line for line in second.output_tail.splitlines() if "json/__init__" in line]
    assert any("code object from" in line and "/pycache/" in line for line in loaded), loaded


def test_bytecode_a_gate_forges_for_a_library_module_never_reaches_the_next_run(
    tmp_path: Path,
) -> None:
    seed = BytecodeSeed(tmp_path / "seed")
    forge, check = gates(tmp_path, seed, f"python -c {shlex.quote(FORGE)}", CHECK)
    assert forge.passed, forge.output_tail  # the forgery worked in its own run
    assert check.passed, check.output_tail  # and the next run ran json's source
    # Seeded from the source by the worker: the seed's json is the real one.
    (again,) = gates(tmp_path, seed, CHECK)
    assert again.passed and seeded(seed, JSON_SOURCE).is_file()


def test_the_worktree_s_modules_are_never_seeded(tmp_path: Path) -> None:
    seed = BytecodeSeed(tmp_path / "seed", roots=[tmp_path])  # even inside a library folder
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    (worktree / "feature.py").write_text("VALUE = 1\n")
    (result,) = gates(tmp_path, seed, "python -c 'import feature'")
    assert result.passed
    assert not seeded(seed, worktree / "feature.py").exists()
    assert not any(p.name.startswith("feature.") for p in seed.folder.rglob("*"))


def test_a_library_upgraded_after_it_was_seeded_is_seeded_again(tmp_path: Path) -> None:
    library = tmp_path / "lib"
    library.mkdir()
    source = library / "upgraded.py"
    source.write_text("VERSION = 1\n")
    seed = BytecodeSeed(tmp_path / "seed", roots=[library])
    check = f"PYTHONPATH={library} python -c 'import upgraded'"
    gates(tmp_path, seed, check)
    first = seeded(seed, source).read_bytes()
    source.write_text("VERSION = 22\n")  # an upgrade: another size, another time
    os.utime(source, (1_000_000_000, 1_000_000_000))
    gates(tmp_path, seed, check)
    # Stamped for the new source: the next run loads it from the seed, not compiling it again.
    again = seeded(seed, source).read_bytes()
    assert again != first
    assert int.from_bytes(again[8:12], "little") == 1_000_000_000
    assert int.from_bytes(again[12:16], "little") == source.stat().st_size


def test_a_seed_another_user_could_write_is_neither_laid_nor_learned_into(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "seed"
    folder.mkdir()
    planted = seeded(BytecodeSeed(folder), JSON_SOURCE)
    planted.parent.mkdir(parents=True)
    planted.write_bytes(b"planted")
    seed = BytecodeSeed(folder)
    for unsafe in (0o777, 0o757):
        folder.chmod(unsafe)
        with pytest.raises(UnsafeSeed, match="writable by others"):
            check_private(folder)
        # The planted file is not in the run's pycache folder: the seed was not laid in.
        in_run = f'"$PYTHONPYCACHEPREFIX"/{planted.relative_to(folder)}'
        (result,) = gates(tmp_path, seed, f"test ! -e {in_run} && {CHECK}")
        assert result.passed, result.output_tail
        # Nor learned into: the worker's own bytecode of json did not replace it.
        assert planted.read_bytes() == b"planted"
    folder.chmod(0o700)  # the worker's own again: laid in, as the check above would see
    (laid,) = gates(tmp_path, seed, f"test ! -e {in_run}")
    assert not laid.passed
    os.chown(folder, 65534, 65534)  # nobody's: the tests run as root in CI
    if os.geteuid() == 0:
        with pytest.raises(UnsafeSeed, match="belongs to another user"):
            check_private(folder)
    os.chown(folder, os.geteuid(), os.getegid())
    link = tmp_path / "link"
    link.symlink_to(folder)
    with pytest.raises(UnsafeSeed, match="not a folder"):
        check_private(link)


def test_the_seed_s_folders_are_the_worker_s_alone_whatever_the_umask(tmp_path: Path) -> None:
    seed = BytecodeSeed(tmp_path / "seed")
    old = os.umask(0)
    try:
        (result,) = gates(tmp_path, seed, CHECK)
    finally:
        os.umask(old)
    assert result.passed and seeded(seed, JSON_SOURCE).is_file()
    modes = {p.stat().st_mode & 0o777 for p in [seed.folder, *seed.folder.rglob("*")] if p.is_dir()}
    assert modes == {0o700}
    check_private(seed.folder)


def test_a_seed_is_refused_when_a_folder_above_lets_everyone_rename_it(tmp_path: Path) -> None:
    above = tmp_path / "shared"
    (above / "mine" / "seed").mkdir(parents=True)
    above.chmod(0o777)  # everyone may rename `mine`, and put their own in its place
    with pytest.raises(UnsafeSeed, match=f"is in {above}, which others may write"):
        check_private(above / "mine" / "seed")
    above.chmod(0o1777)  # as /tmp: only the owner may rename what is theirs
    check_private(above / "mine" / "seed")


def test_at_start_a_seed_others_can_reach_into_must_hold_only_the_worker_s_files(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "seed"
    (folder / "usr").mkdir(parents=True)
    planted = folder / "usr" / f"json{SUFFIX}"
    planted.symlink_to("/etc/hostname")
    check_private(folder)  # a run's quick look: the folder itself only
    with pytest.raises(UnsafeSeed, match="which is a link, another user's, or writable"):
        check_private(folder, whole=True)
    planted.unlink()
    planted.write_bytes(b"")
    planted.chmod(0o666)
    with pytest.raises(UnsafeSeed, match="chmod -R go-w"):
        check_private(folder, whole=True)
    folder.chmod(0o700)  # no one else can reach inside: what is there is the worker's
    check_private(folder, whole=True)
