"""What a check costs with the worker's bytecode of the worktree's modules beside one without.

    .venv/bin/python -m bench.check_bytecode [--rounds 5]

A real project as a run meets it: parso's pinned sdist (bench/story_cost.py) in a worktree
with its own `.venv` holding pytest (what a `setup` of `python3 -m venv .venv && .venv/bin/pip
install pytest` leaves; installed once from PyPI), its check `.venv/bin/python -m pytest`.
Two ways alternate round by round, each check through `run_gates` as in a run, each way with
the library seed (bytecode_seed.py) warmed first: without and with the run's own bytecode
(worktree_bytecode.py), which the way's first check fills. Each round runs one test file (as a
story's proof does) and the whole suite. CPU seconds of the checks (this process and every
child it waited for), medians over the rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from bench.story_cost import SUBJECT, cpu_s, sdist
from worker.confine.bytecode_seed import BytecodeSeed
from worker.confine.redact import Redactor
from worker.confine.worktree_bytecode import WorktreeBytecode
from worker.model.gates import GateSpec
from worker.verdict.gates import run_gates

PYTEST_VERSION = "9.2.0"
CHECK = ".venv/bin/python -m pytest -q -p no:cacheprovider"
ONE_FILE = f"{CHECK} test/test_utils.py"


def make_worktree(tmp: Path) -> Path:
    with tarfile.open(sdist()) as archive:
        archive.extractall(tmp, filter="data")
    worktree = tmp / f"{SUBJECT.name}-{SUBJECT.version}"
    venv = worktree / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, f"pytest=={PYTEST_VERSION}"], check=True)
    return worktree


def check(
    worktree: Path, tmp: Path, command: str, seed: BytecodeSeed, own: WorktreeBytecode | None
) -> float:
    home = tmp / "home"
    shutil.rmtree(home, ignore_errors=True)
    (home / "tmp").mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(home / "tmp")}
    started = cpu_s()
    (result,) = run_gates(
        [GateSpec(name="tests", command=command)],
        cwd=worktree,
        env=env,
        output_dir=tmp / "out",
        label="check",
        redactor=Redactor(),
        seed=seed,
        own_bytecode=own,
    )
    spent = cpu_s() - started
    if not result.passed:
        sys.exit(f"the check failed:\n{result.output_tail[-2000:]}")
    return spent


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="reqdrive-bench-bytecode-") as name:
        tmp = Path(name)
        worktree = make_worktree(tmp)
        seed = BytecodeSeed(tmp / "seed")
        ways: dict[str, WorktreeBytecode | None] = {
            "without": None,
            "with": WorktreeBytecode(tmp / "own"),
        }
        check(worktree, tmp, CHECK, seed, None)  # the library seed, warmed for both ways
        for own in ways.values():
            if own is not None:
                check(worktree, tmp, CHECK, seed, own)  # the run's first check fills it
        spent: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for way, own in ways.items():
                for what, command in (("one test file", ONE_FILE), ("whole suite", CHECK)):
                    spent.setdefault((way, what), []).append(
                        check(worktree, tmp, command, seed, own)
                    )
        kept = sum(1 for _ in (tmp / "own").rglob("*.pyc"))
    print(
        f"{SUBJECT.name} {SUBJECT.version}, pytest {PYTEST_VERSION} in the worktree's .venv; "
        f"{args.rounds} rounds; {kept} modules kept; 1-minute load {os.getloadavg()[0]:.1f}"
    )
    print("| check | CPU s without | CPU s with | with / without | saved s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for what in ("one test file", "whole suite"):
        without = statistics.median(spent[("without", what)])
        with_own = statistics.median(spent[("with", what)])
        print(
            f"| {what} | {without:.2f} | {with_own:.2f} | {with_own / without:.2f} "
            f"| {without - with_own:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
