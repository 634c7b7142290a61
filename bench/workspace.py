"""Measure workspace preparation, cold and warm cache, beside a plain `git clone --no-local`.

A repository of 30,000 files in nested folders and 3,000 commits is generated once with
`git fast-import` under bench/.work/ (gitignored) and reused by later runs. In the same run
the bench then times, median of a few repetitions each:

- plain clone: `git clone --no-local` (a full transfer and checkout, what a runner without a
  cache does for every run);
- cold prepare: RepositoryCache.prepare with an empty cache (mirror fetch + worktree);
- warm prepare: the cache exists and the remote is unchanged (no-op fetch + worktree), both
  with a new worktree (every file written) and with the spare checkout a finished run left
  (switched in place: only differing files written) — the default;
- warm prepare after one new upstream commit (incremental fetch + worktree), both ways;
- no-op fetch alone, on the warm mirror.

Nothing is deleted until the end: on the VM these figures come from (ext4 with online discard)
deleting tens of thousands of files slows the writes that follow for seconds, which would be
billed to whichever operation came next.

Each measured operation runs in a fresh Python child, so its peak RSS (the largest git process
it started, from getrusage(RUSAGE_CHILDREN)) belongs to that operation alone; the time is
taken inside the child and excludes interpreter start-up.

    .venv/bin/python bench/workspace.py            # the full run
    .venv/bin/python bench/workspace.py --quick    # 2,000 files, 100 commits: a smoke run

The engine's per-story overhead is measured by bench/engine.py; see the hook at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from worker.git.cache import RepositoryCache  # noqa: E402
from worker.git.mirror import BRANCH_REFSPEC, TAG_REFSPEC  # noqa: E402
from worker.git.runner import run_git  # noqa: E402
from worker.git.worktree import Worktree  # noqa: E402

WORK = ROOT / "bench" / ".work"
ENGINE_BENCH = ROOT / "bench" / "engine.py"
TARGET_RATIO = 0.05
WARM_HEADLINE = "warm prepare, spare checkout (remote unchanged)"
FILES_PER_COMMIT = 10
LINES_PER_FILE = 24
WORDS = [
    *("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"),
    *("lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi"),
    *("chi", "psi", "omega", "return", "value", "index", "config", "parse", "render", "token"),
]
BENCH_GITCONFIG = "[user]\n\tname = bench\n\temail = bench@reqdrive.invalid\n"


@dataclass(frozen=True)
class Shape:
    files: int
    commits: int
    repeats: int


@dataclass
class Sample:
    seconds: float
    peak_rss_kib: int


# --- the generated repository ------------------------------------------------------------------


def source_repo(shape: Shape) -> Path:
    """The bare source repository for `shape`, generated on first use."""
    path = WORK / f"source-{shape.files}f-{shape.commits}c.git"
    done_marker = path / "reqdrive-bench-complete"
    if done_marker.exists():
        print(f"reusing {path.relative_to(ROOT)}")
        return path
    shutil.rmtree(path, ignore_errors=True)
    started = time.perf_counter()
    run_git(["init", "--quiet", "--bare", "--initial-branch=main", str(path)], cwd=WORK)
    _fast_import(path, shape)
    # One well-deltified pack, as a hosted repository would serve.
    run_git(["repack", "-a", "-d", "-q"], cwd=path, timeout_s=3600)
    done_marker.write_text("generated\n")
    print(f"generated {path.relative_to(ROOT)} in {time.perf_counter() - started:.1f} s")
    return path


def _fast_import(path: Path, shape: Shape) -> None:
    proc = subprocess.Popen(
        ["git", "fast-import", "--quiet", "--done"], cwd=path, stdin=subprocess.PIPE
    )
    assert proc.stdin is not None
    _write_history(proc.stdin, shape)
    proc.stdin.close()
    if proc.wait() != 0:
        raise SystemExit("git fast-import failed")


def _write_history(out: IO[bytes], shape: Shape) -> None:
    paths = [_file_path(i) for i in range(shape.files)]
    rng = random.Random(shape.files * 7919 + shape.commits)
    _write_commit(out, 1, "initial import", ((p, _content(i, 0)) for i, p in enumerate(paths)))
    for n in range(2, shape.commits + 1):
        chosen = rng.sample(range(shape.files), FILES_PER_COMMIT)
        changes = ((paths[i], _content(i, n)) for i in chosen)
        _write_commit(out, n, f"change {FILES_PER_COMMIT} files ({n})", changes)
    out.write(b"done\n")


def _file_path(i: int) -> str:
    return f"src/pkg{i % 40:02d}/mod{(i // 40) % 25:02d}/part{(i // 1000):02d}/file{i:05d}.txt"


def _content(i: int, version: int) -> bytes:
    """A file's lines are fixed per file; each new version rewrites one of them (deltas)."""
    rng = random.Random(i)
    lines = [" ".join(rng.choices(WORDS, k=8)) for _ in range(LINES_PER_FILE)]
    if version:
        lines[version % LINES_PER_FILE] = f"revision {version} of file {i}"
    return ("\n".join(lines) + "\n").encode()


def _write_commit(
    out: IO[bytes], mark: int, message: str, changes: Iterator[tuple[str, bytes]]
) -> None:
    when = 1_700_000_000 + mark * 60
    msg = message.encode()
    header = (
        f"commit refs/heads/main\nmark :{mark}\n"
        f"author Bench <bench@reqdrive.invalid> {when} +0000\n"
        f"committer Bench <bench@reqdrive.invalid> {when} +0000\n"
        f"data {len(msg)}\n"
    ).encode()
    out.write(header + msg + b"\n")
    if mark > 1:
        out.write(f"from :{mark - 1}\n".encode())
    for path, data in changes:
        out.write(f"M 100644 inline {path}\ndata {len(data)}\n".encode() + data + b"\n")
    out.write(b"\n")


def add_upstream_commit(source: Path, n: int) -> None:
    """One more commit on main, as a human's push would add."""
    data = f"upstream change {n} at {time.time()}\n".encode()
    stream = (
        b"commit refs/heads/main\n"
        b"committer Bench <bench@reqdrive.invalid> 1800000000 +0000\n"
        b"data 8\nupstream\n"
        b"from refs/heads/main^0\n"
        + f"M 100644 inline UPSTREAM-{n}.txt\ndata {len(data)}\n".encode()
        + data
        + b"\ndone\n"
    )
    subprocess.run(
        ["git", "fast-import", "--quiet", "--done"], cwd=source, input=stream, check=True
    )


# --- measured operations, each in its own child process ---------------------------------------


def child_main(request: dict[str, Any]) -> None:
    operation = CHILD_OPERATIONS[request["op"]]
    started = time.perf_counter()
    operation(request)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    print(json.dumps({"seconds": seconds, "peak_rss_kib": peak}))


def _op_clone(request: dict[str, Any]) -> None:
    dest = Path(request["dest"])
    run_git(["clone", "--no-local", "--quiet", request["source"], str(dest)], cwd=dest.parent)


def _op_prepare(request: dict[str, Any]) -> None:
    cache = RepositoryCache(
        Path(request["cache"]), environment=os.environ, spares_per_mirror=request["spares"]
    )
    cache.prepare(request["source"], branch=request["branch"], base_ref=None, run_id=request["run"])


def _op_fetch(request: dict[str, Any]) -> None:
    args = ["fetch", "--prune", "--quiet", "--", request["source"], BRANCH_REFSPEC, TAG_REFSPEC]
    run_git(args, cwd=Path(request["mirror"]))


CHILD_OPERATIONS: dict[str, Callable[[dict[str, Any]], None]] = {
    "clone": _op_clone,
    "prepare": _op_prepare,
    "fetch": _op_fetch,
}


def measure(**request: Any) -> Sample:
    # Flush what earlier phases wrote and deleted (ext4 here discards freed blocks), so one
    # operation's disk work is not billed to the next.
    os.sync()
    done = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(request)],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return Sample(result["seconds"], result["peak_rss_kib"])


# --- the phases --------------------------------------------------------------------------------


class Round:
    """One repetition of every operation, back to back, so load from other processes on the
    machine falls on all of them alike rather than on whichever phase ran at a bad moment."""

    def __init__(self, source: Path, scratch: Path) -> None:
        self.source = source
        self.scratch = scratch
        self.warm_cache = scratch / "warm-cache"
        self.commits = 0

    def prime(self) -> None:
        """The cache a previous run left behind, and (parked) the checkout it finished with."""
        _prepare(self.source, self.warm_cache, "prime")
        _remove(self.warm_cache, "prime", spares=1)

    def run(self, n: int) -> dict[str, Sample]:
        samples = {
            "plain clone": self.plain_clone(n),
            "cold prepare (no cache)": _prepare(self.source, self.scratch / f"cold-{n}", "cold"),
        }
        for spares, label in ((0, "new worktree"), (1, "spare checkout")):
            samples[f"warm prepare, {label} (remote unchanged)"] = self.warm(n, spares, False)
            samples[f"warm prepare, {label} (one new upstream commit)"] = self.warm(n, spares, True)
        samples["no-op fetch alone"] = self.noop_fetch()
        return samples

    def plain_clone(self, n: int) -> Sample:
        dest = self.scratch / f"clone-{n}"
        return measure(op="clone", source=str(self.source), dest=str(dest))

    def warm(self, n: int, spares: int, new_commit: bool) -> Sample:
        """With spares on, the run's worktree is removed (parked) afterwards, as the pipeline
        does, and the next prepare switches that checkout; without, a new worktree is written
        (and kept: deleting now would slow what follows, see above)."""
        if new_commit:
            self.commits += 1
            add_upstream_commit(self.source, self.commits)
        run_id = f"warm-{spares}-{int(new_commit)}-{n}"
        sample = _prepare(self.source, self.warm_cache, run_id, spares)
        if spares:
            _remove(self.warm_cache, run_id, spares)
        return sample

    def noop_fetch(self) -> Sample:
        mirror = RepositoryCache(self.warm_cache).mirror_path(str(self.source))
        return measure(op="fetch", source=str(self.source), mirror=str(mirror))


def _prepare(source: Path, cache: Path, run_id: str, spares: int = 0) -> Sample:
    branch = f"reqdrive/{run_id}"
    return measure(
        op="prepare", source=str(source), cache=str(cache), run=run_id, branch=branch, spares=spares
    )


def _remove(cache: Path, run_id: str, spares: int) -> None:
    repo_cache = RepositoryCache(cache, environment=os.environ, spares_per_mirror=spares)
    path = repo_cache.worktrees_dir / run_id
    repo_cache.remove(Worktree(path, f"reqdrive/{run_id}", "main", "", resumed=False))


# --- report ------------------------------------------------------------------------------------


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    git_version = run_git(["--version"], cwd=ROOT)
    system = f"{platform.system()} {platform.release()}"
    return (
        f"{cpu}, {os.cpu_count()} cores, {mem_kib / 1024 / 1024:.0f} GiB RAM, {system}, "
        f"{git_version}, Python {platform.python_version()}"
    )


def repo_size(source: Path) -> str:
    objects = run_git(["count-objects", "-v", "-H"], cwd=source)
    fields = dict(line.split(": ", 1) for line in objects.splitlines())
    count = int(fields.get("in-pack", "0")) + int(fields.get("count", "0"))
    return f"{count:,} objects, pack {fields.get('size-pack', '?')}"


def report(
    shape: Shape, source: Path, results: dict[str, list[Sample]], load: tuple[float, float]
) -> str:
    clone = statistics.median(s.seconds for s in results["plain clone"])
    rows = [
        "| operation | median s | min s | max s | vs plain clone | peak RSS of git (MiB) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, samples in results.items():
        seconds = [s.seconds for s in samples]
        median = statistics.median(seconds)
        rss = max(s.peak_rss_kib for s in samples) / 1024
        rows.append(
            f"| {name} | {median:.3f} | {min(seconds):.3f} | {max(seconds):.3f} "
            f"| {median / clone:.1%} | {rss:.0f} |"
        )
    warm = statistics.median(s.seconds for s in results[WARM_HEADLINE])
    verdict = "met" if warm / clone <= TARGET_RATIO else "NOT met"
    return "\n".join(
        [
            f"Repository: {shape.files:,} files, {shape.commits:,} commits, {repo_size(source)}; "
            f"{shape.repeats} repetitions each.",
            f"Machine: {machine()}",
            "",
            *rows,
            "",
            f"Warm prepare (spare checkout, remote unchanged) / plain clone = {warm / clone:.1%} "
            f"(target <= {TARGET_RATIO:.0%}: {verdict}).",
            f"Load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f}.",
        ]
    )


def run(shape: Shape) -> str:
    WORK.mkdir(parents=True, exist_ok=True)
    gitconfig = WORK / "gitconfig"
    gitconfig.write_text(BENCH_GITCONFIG)
    # The bench's git sees none of the developer's configuration.
    os.environ["GIT_CONFIG_GLOBAL"] = str(gitconfig)
    os.environ["GIT_CONFIG_NOSYSTEM"] = "1"
    source = source_repo(shape)
    scratch = WORK / f"scratch-{os.getpid()}"
    scratch.mkdir()
    try:
        load_before = os.getloadavg()[0]
        results = _phases(source, scratch, shape.repeats)
        return report(shape, source, results, (load_before, os.getloadavg()[0]))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _phases(source: Path, scratch: Path, repeats: int) -> dict[str, list[Sample]]:
    rounds = Round(source, scratch)
    rounds.prime()
    results: dict[str, list[Sample]] = {}
    for n in range(repeats):
        print(f"round {n + 1} of {repeats} ...", flush=True)
        for name, sample in rounds.run(n).items():
            results.setdefault(name, []).append(sample)
    return results


def run_engine_bench(quick: bool) -> None:
    # ENGINE OVERHEAD HOOK: the engine's per-story overhead (instant agent, no gates) is
    # bench/engine.py, written alongside the engine; it runs here when present.
    if not ENGINE_BENCH.exists():
        print(f"\n(engine overhead: {ENGINE_BENCH.relative_to(ROOT)} not present; skipped)")
        return
    print("\n## Engine overhead (bench/engine.py)\n", flush=True)
    smoke = ["--stories", "2", "--repeats", "1"] if quick else []
    done = subprocess.run([sys.executable, "-m", "bench.engine", *smoke], cwd=ROOT, check=False)
    if done.returncode != 0:
        print(f"(bench/engine.py exited with {done.returncode})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--files", type=int, help="files in the generated repository")
    parser.add_argument("--commits", type=int, help="commits in the generated repository")
    parser.add_argument("--repeats", type=int, help="repetitions per operation")
    parser.add_argument("--output", type=Path, help="also write the markdown table here")
    parser.add_argument("--no-engine", action="store_true", help="skip the engine hook")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(json.loads(args.child))
        return
    base = Shape(2_000, 100, 2) if args.quick else Shape(30_000, 3_000, 5)
    shape = Shape(
        args.files or base.files, args.commits or base.commits, args.repeats or base.repeats
    )
    text = report_header() + run(shape)
    print("\n" + text)
    if args.output:
        args.output.write_text(text + "\n")
    if not args.no_engine:
        run_engine_bench(args.quick)


def report_header() -> str:
    return "## Workspace preparation (bench/workspace.py)\n\n"


if __name__ == "__main__":
    main()
