"""What a story costs on a real project's test suite, beside one run of that suite by hand.

    .venv/bin/python -m bench.story_cost [--stories 3] [--by-assertion] [--profile]
                                         [--checks whole|affected] [--project parso|networkx]

The project is parso's sdist from PyPI (pure Python, 1,351 tests with its doctests), or with
`--project networkx` networkx's (4,708 tests, a suite about eight times as long), pinned by
version and sha256 and kept under `.cache/bench/`. It is made a git repository on a bare
remote whose only gate is its own pytest suite; the scripted agent (a real process) makes
each story's trivial honest change: a module and a test of its own that fails without it.
Four runs, each timed whole (wall clock from the pipeline's start to its result):

- one story on a fresh work dir (the baseline measured),
- N stories on a fresh work dir,
- one story, then N stories, on a work dir whose baseline cache holds the base commit.

The reference is `python -m pytest` of the same checkout by hand, run before each of the four
and taken as the median; the ratios divide each run's wall time, and its CPU time (this
process and every child it waited for: gates, agent, git), by the reference's. On a shared
machine the CPU ratio is the one to read. Each run also counts its gate runs (the
`*.gates.json` files its folder holds; a baseline from the cache is not one).
With `--profile`, each run's CPU is also split by where it went (`Profile`): each kind of gate
run, the agent calls, and the worker's own steps between them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.integration.test_pipeline import Project
from worker.model.state import StoryState
from worker.run.spec import Requirement

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "bench"


@dataclass(frozen=True)
class Subject:
    """A real project's pinned sdist, where its package and its tests are."""

    name: str
    version: str
    sha256: str
    package: str  # the import name; each story adds <package>/answer_<n>.py
    tests: str  # the folder each story's test goes in

    @property
    def sdist(self) -> str:
        return f"{self.name}-{self.version}.tar.gz"


SUBJECTS = {
    # 1,351 tests with its doctests, about 12 s of CPU on the recording machines.
    "parso": Subject(
        "parso",
        "0.8.4",
        "eb3a7b58240fb99099a345571deecc0f9540ea5f4dd2fe14c2a99d6b281ab92d",
        "parso",
        "test",
    ),
    # 4,708 tests (302 skipped without numpy and scipy), about 100 s of CPU: a suite whose
    # length makes the per-story fixed costs small beside it.
    "networkx": Subject(
        "networkx",
        "3.4.2",
        "307c3669428c5362aab27c8a1260aa8f47c4e91d3891f48be0141738d8d053e1",
        "networkx",
        "networkx/tests",
    ),
}
SUBJECT = SUBJECTS["parso"]  # main() sets the one chosen
# parso's suite as its own environment runs it: no pytest plugin loads from an entry point
# (the bench's interpreter is reqdrive's, whose test extras install hypothesis and xdist;
# pytest would rewrite them at every start, about 1.3 s here, a proof's whole cost twice
# over). reqdrive's own plugin is named with -p, which this does not stop.
PYTEST = f"env PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {sys.executable} -m pytest -q -p no:cacheprovider"
GIT = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com"]


def sdist() -> Path:
    """The pinned sdist: downloaded once by pip into .cache/bench/, checked every time."""
    path = CACHE / SUBJECT.sdist
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        pinned = ["--no-binary", ":all:", f"{SUBJECT.name}=={SUBJECT.version}", "-d", str(CACHE)]
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *pinned]
        subprocess.run(pip, check=True)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SUBJECT.sha256:
        path.unlink()
        sys.exit(f"{SUBJECT.sdist}: sha256 {digest}, expected {SUBJECT.sha256}; removed, run again")
    return path


def make_project(tmp: Path, checks: str = "whole") -> tuple[Project, Path]:
    """The subject's sdist as a repository on a bare remote, with reqdrive's config (`checks`:
    what judges each story's commit); and a plain checkout of it to run the suite by hand."""
    with tarfile.open(sdist()) as archive:
        archive.extractall(tmp, filter="data")
    source = tmp / f"{SUBJECT.name}-{SUBJECT.version}"
    (source / ".github").mkdir()
    config = {
        "testCommand": PYTEST,
        "maxIterations": 20,
        "agent": {"timeout": 120},
        "checks": checks,
    }
    (source / ".github" / "reqdrive.yml").write_text(json.dumps(config))
    (source / "docs" / "requirements").mkdir(parents=True, exist_ok=True)
    (source / "docs" / "requirements" / "REQ-001-demo.md").write_text("# REQ-001\nAnswers.\n")
    (source / ".gitignore").write_text("__pycache__/\n*.pyc\n")
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=source, check=True)
    subprocess.run(["git", "add", "-A"], cwd=source, check=True)
    subprocess.run([*GIT, "commit", "-qm", SUBJECT.name], cwd=source, check=True)
    remote = tmp / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(source), str(remote)], check=True)
    return Project(tmp=tmp, remote=remote, work_dir=tmp / "work"), source


def story(n: int) -> dict[str, Any]:
    return {
        "id": f"US-{n:03d}",
        "title": f"Answer {n}",
        "description": f"{SUBJECT.package}.answer_{n}.value() gives {n}",
        "acceptanceCriteria": [f"value() returns {n}"],
        "priority": n,
    }


def honest_change(n: int, *, by_assertion: bool = False) -> dict[str, Any]:
    """A module and its test, which fails without the module: the story's own proof. The
    test fails on the parent at its import (pytest stops at the collection error), or with
    `by_assertion` in the test itself (the suite is collected and runs on)."""
    module = f"{SUBJECT.package}.answer_{n}"
    test = f"from {module} import value\n\n\ndef test_value():\n    assert value() == {n}\n"
    if by_assertion:
        test = (
            "import importlib\n\n\ndef test_value():\n"
            f"    try:\n        value = importlib.import_module('{module}').value\n"
            "    except ImportError:\n        value = None\n"
            f"    assert value is not None and value() == {n}\n"
        )
    return {
        "write": {
            f"{SUBJECT.package}/answer_{n}.py": f"def value():\n    return {n}\n",
            f"{SUBJECT.tests}/test_answer_{n}.py": test,
        }
    }


def requirement(name: str) -> Requirement:
    return Requirement(
        text=f"# {name}\nAnswers.\n",
        source=f"docs/requirements/{name}.md",
        slug=name.lower(),
        repo_path=f"docs/requirements/{name}.md",
    )


def cpu_s() -> float:
    """CPU seconds of this process and every child it waited for: unlike wall time, hardly
    moved by what else the machine runs."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# A gate run's kind, from its label (run_folder.gates_label and the suffixes the engine adds).
GATE_KINDS = (
    ("baseline", re.compile(r"^baseline$")),
    ("tests-call proof (parent + its tests)", re.compile(r"-tests$")),
    ("added tests on the parent", re.compile(r"\.parent$")),
    ("re-runs alone", re.compile(r"\.rerun\d+$")),
    ("gates as they were", re.compile(r"\.restored$")),
    ("like with like at the head", re.compile(r"\.alike$")),
    ("final verification", re.compile(r"^verification$")),
    ("bisect of the final checks", re.compile(r"^verification\.bisect\d+$")),
    ("implement attempt (the story's check)", re.compile(r"^iteration-\d+$")),
)


class Profile:
    """Where a run's CPU goes: each gate run and agent call timed by the CPU of this process
    and the children it waited for (the gates and agents are children, reaped before the call
    returns), by kind; the rest is the worker's own (git, commits, reports, planning steps).
    Installed by wrapping `run_gates_on` and `call_agent` wherever a module imported them."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.count: dict[str, int] = defaultdict(int)
        self._depth = 0

    @contextmanager
    def measure(self, kind: str) -> Iterator[None]:
        self._depth += 1
        started = cpu_s()
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:  # a gate run inside an agent call's steps counts once
                self.cpu[kind] += cpu_s() - started
                self.count[kind] += 1

    @contextmanager
    def installed(self) -> Iterator[None]:
        from worker.run import calls

        originals: dict[str, Callable[..., Any]] = {
            "run_gates_on": calls.run_gates_on,
            "call_agent": calls.call_agent,
        }

        def gates(ctx: Any, label: str, **kwargs: Any) -> Any:
            kind = next((k for k, p in GATE_KINDS if p.search(label)), f"gates {label}")
            with self.measure(f"gates: {kind}"):
                return originals["run_gates_on"](ctx, label, **kwargs)

        def agent(ctx: Any, label: Any, prompt: str, **kwargs: Any) -> Any:
            said = str(label)
            kind = (
                "plan" if said.startswith("plan") else "tests" if "tests" in said else "implement"
            )
            with self.measure(f"agent: {kind} call"):
                return originals["call_agent"](ctx, label, prompt, **kwargs)

        wrapped: dict[str, Callable[..., Any]] = {"run_gates_on": gates, "call_agent": agent}
        patched = []
        for module in list(sys.modules.values()):
            for name, original in originals.items():
                if getattr(module, name, None) is original:
                    setattr(module, name, wrapped[name])
                    patched.append((module, name, original))
        try:
            yield
        finally:
            for module, name, original in patched:
                setattr(module, name, original)


def by_hand(checkout: Path) -> tuple[float, float]:
    """One run of the suite by hand, cold: wall and CPU seconds."""
    # As a CI job runs it on a fresh checkout: nothing compiled before, nothing kept after
    # (whatever the caller's shell says).
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    started, cpu = time.perf_counter(), cpu_s()
    done = subprocess.run(PYTEST.split(), cwd=checkout, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - started, cpu_s() - cpu
    if done.returncode != 0:
        sys.exit(f"the suite fails by hand:\n{done.stdout[-2000:]}")
    return elapsed


def one_run(
    project: Project, name: str, stories: int, *, by_assertion: bool, profile: bool = False
) -> dict[str, Any]:
    planned = [story(n) for n in range(1, stories + 1)]
    changes = {
        f"US-{n:03d}": [honest_change(n, by_assertion=by_assertion)] for n in range(1, stories + 1)
    }
    scenario = project.scenario(
        {"plan": [{"prd": {"project": "Answers", "userStories": planned}}], "stories": changes}
    )
    run_id = name.lower()
    parts = Profile()
    started, cpu = time.perf_counter(), cpu_s()
    if profile:
        with parts.installed():
            result = project.run(scenario, run_id=run_id, requirement=requirement(name))
    else:
        result = project.run(scenario, run_id=run_id, requirement=requirement(name))
    wall, cpu = time.perf_counter() - started, cpu_s() - cpu
    if not all(s.state is StoryState.PASSED for s in result.stories) or not result.ready:
        reasons = [s.attempts[-1].reason if s.attempts else "" for s in result.stories]
        sys.exit(f"{name}: not every story passed: {reasons}")
    run_dir = project.run_dir(run_id)
    rounds = sorted(run_dir.glob("*.gates.json"))
    summary = json.loads((run_dir / "verification-summary.json").read_text())
    cached = bool(summary.get("baseline_from_cache"))
    # A baseline from the cache is written to the run folder too, but nothing ran.
    ran = [p for p in rounds if not (cached and p.name == "baseline.gates.json")]
    gate_s = sum(g["durationS"] for p in ran for g in json.loads(p.read_text()))
    # The tests calls' proofs (tests: first): on the test: commit, alone (the runner selected
    # the story's test modules) or the whole suite.
    proofs = [json.loads(p.read_text()) for p in ran if p.name.endswith("-tests.gates.json")]
    alone = sum(1 for gates in proofs if any(g.get("selected") for g in gates))
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "rounds": len(ran),
        # Of those, the fail-to-pass proofs on a story's parent: pytest stops at the
        # collection error of a test module importing what only the story adds.
        "parent_rounds": sum(1 for p in ran if p.name.endswith(".parent.gates.json")),
        "proofs": f"{alone} alone, {len(proofs) - alone} whole",
        "gate_s": gate_s,
        "baseline_cached": cached,
        "final_reused": summary.get("gates_reused_from"),
        "profile": parts,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stories", type=int, default=3)
    parser.add_argument(
        "--by-assertion",
        action="store_true",
        help="each story's test fails on its parent by assertion, not at its import",
    )
    parser.add_argument(
        "--profile", action="store_true", help="split each run's CPU by where it went"
    )
    parser.add_argument(
        "--checks",
        choices=["whole", "affected"],
        default="whole",
        help="what judges each story's commit (the repository's `checks`)",
    )
    parser.add_argument("--project", choices=sorted(SUBJECTS), default="parso")
    parser.add_argument(
        "--one-story-only",
        action="store_true",
        help="only the one-story runs (fresh, then on the cached base): half the time",
    )
    args = parser.parse_args()
    global SUBJECT
    SUBJECT = SUBJECTS[args.project]
    n = args.stories
    with tempfile.TemporaryDirectory(prefix="reqdrive-bench-cost-") as tmp:
        project, checkout = make_project(Path(tmp), args.checks)
        hand, rows = [], []
        cases = [
            ("one story", "REQ-001", 1),
            (f"{n} stories", "REQ-002", n),
            ("one story, cached base", "REQ-003", 1),
            (f"{n} stories, cached base", "REQ-004", n),
        ]
        if args.one_story_only:
            cases = [case for case in cases if case[2] == 1]
        for label, name, stories in cases:
            hand.append(by_hand(checkout))
            if label == f"{n} stories":  # the N-story run on a fresh work dir too
                shutil.rmtree(project.work_dir, ignore_errors=True)
            rows.append(
                (
                    label,
                    stories,
                    one_run(
                        project,
                        name,
                        stories,
                        by_assertion=args.by_assertion,
                        profile=args.profile,
                    ),
                )
            )
        wall_ref = statistics.median(h[0] for h in hand)
        cpu_ref = statistics.median(h[1] for h in hand)
    load = os.getloadavg()[0]
    walls = ", ".join(f"{h[0]:.2f}" for h in hand)
    cpus = ", ".join(f"{h[1]:.2f}" for h in hand)
    print(f"{SUBJECT.name} {SUBJECT.version} by hand: wall median {wall_ref:.2f} s ({walls});")
    print(f"CPU median {cpu_ref:.2f} s ({cpus}); 1-minute load {load:.1f}")
    print(
        "| run | gate runs (parent proofs) | tests-call proofs | wall s | in gates s | CPU s "
        "| wall / by hand | CPU / by hand | target |"
    )
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for label, stories, row in rows:
        target = stories + (0.1 if "cached" in label else 1.1)  # the targets
        print(
            f"| {label} | {row['rounds']} ({row['parent_rounds']}) | {row['proofs']} "
            f"| {row['wall_s']:.1f} "
            f"| {row['gate_s']:.1f} | {row['cpu_s']:.1f} | {row['wall_s'] / wall_ref:.2f} "
            f"| {row['cpu_s'] / cpu_ref:.2f} | ≤ {target:.1f} |"
        )
    if args.profile:
        print_profile(rows, cpu_ref)
    return 0


def print_profile(rows: list[tuple[str, int, dict[str, Any]]], cpu_ref: float) -> None:
    """Each run's CPU by where it went, in suites by hand (CPU / the reference's)."""
    kinds = sorted({k for _, _, row in rows for k in row["profile"].cpu})
    print()
    print("CPU by where it went, in suites by hand (runs of it in parentheses):")
    print("| where | " + " | ".join(label for label, _, _ in rows) + " |")
    print("| --- |" + " ---: |" * len(rows))
    for kind in kinds:
        cells = []
        for _, _, row in rows:
            parts = row["profile"]
            cells.append(
                f"{parts.cpu[kind] / cpu_ref:.2f} ({parts.count[kind]})"
                if kind in parts.cpu
                else "—"
            )
        print(f"| {kind} | " + " | ".join(cells) + " |")
    rest = [row["cpu_s"] - sum(row["profile"].cpu.values()) for _, _, row in rows]
    print("| the worker's own steps | " + " | ".join(f"{r / cpu_ref:.2f}" for r in rest) + " |")


if __name__ == "__main__":
    sys.exit(main())
