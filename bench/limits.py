"""Measure the bounded readers beside the code they replaced: the JUnit parse and the secret scan.

The "before" rows run the modules as they were at BEFORE_COMMIT, loaded from git history into
this process, on the same inputs:

- `junit`: peak memory (the process's max RSS, one fresh interpreter per row) and time to read
  a generated 1,000,000-case report (about 55 MB): the old whole-tree parse; the streaming
  reader with the default limits (refused by size, unread); and with the size limit raised so
  it streams until the test-case limit stops it.
- `scan`: the secret scan of a staged change adding 20,000 files (one holding a secret): wall
  time and git processes started (counted through the module's git runner).
- `calls`: what the per-call limits add to a sandboxed call (`true` through run_process as it
  was and as it is: the cgroups made and removed, or `prlimit`), alternating call by call.

    .venv/bin/python -m bench.limits               # both, full size (the old scan takes minutes)
    .venv/bin/python -m bench.limits --quick       # 100,000 cases, 2,000 files
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from worker.confine.limits import ResourceLimits
from worker.confine.redact import Redactor
from worker.git.runner import run_git

ROOT = Path(__file__).resolve().parents[1]
BEFORE_COMMIT = "c7c36cd"  # the last commit before the limits
CASE = '<testcase classname="t.m" name="test_{0:07d}" time="0"/>\n'
TOKEN = "ghs_" + "Q7w9E2r4T6y8U1i3O5p7A9s2D4f6G8h0J2k4"


def old_module(path: str, name: str) -> types.ModuleType:
    """The module at `path` as it was at BEFORE_COMMIT, imported under `name`."""
    source = subprocess.run(
        ["git", "show", f"{BEFORE_COMMIT}:{path}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType(name)
    module.__file__ = f"{BEFORE_COMMIT}:{path}"
    sys.modules[name] = module  # pydantic resolves the models' annotations through it
    exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102 - our own code
    return module


def write_report(path: Path, cases: int) -> None:
    with path.open("w") as out:
        out.write('<testsuite name="pytest">\n')
        for n in range(cases):
            out.write(CASE.format(n))
        out.write("</testsuite>\n")


def measure_junit(way: str, report: Path) -> dict[str, Any]:
    """Run in a fresh interpreter: read the report one way, say the time and peak memory."""
    from worker.verdict.junit_report import read_junit

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    if way == "before":
        result = old_module("worker/verdict/gates.py", "bench_old_gates").read_junit(report)
    else:
        limits = ResourceLimits() if way == "after" else ResourceLimits(report_mib=1024)
        result = read_junit(report, limits=limits)
    seconds = time.perf_counter() - started
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    tests = None if result.tests is None else len(result.tests)
    return {
        "way": way,
        "s": seconds,
        "rss_mib": grown / 1024,
        "tests": tests,
        "problem": result.problem,
    }


def junit_rows(cases: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="reqdrive-bench-junit-") as tmp:
        report = Path(tmp) / "junit.xml"
        write_report(report, cases)
        size = report.stat().st_size
        rows = []
        for way in ("before", "after", "after, size limit raised"):
            done = subprocess.run(
                [sys.executable, "-m", "bench.limits", "--measure-junit", way, str(report)],
                cwd=ROOT,
                check=True,
                capture_output=True,
                text=True,
            )
            rows.append({**json.loads(done.stdout), "bytes": size, "cases": cases})
        return rows


def scan_rows(files: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="reqdrive-bench-scan-") as tmp:
        repo = Path(tmp)
        git = ["git", "-c", "commit.gpgSign=false"]
        subprocess.run([*git, "init", "-q", "-b", "main"], cwd=repo, check=True)
        (repo / "README.md").write_text("hello\n")
        subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
        subprocess.run([*git, "commit", "-qm", "base"], cwd=repo, check=True)
        for n in range(files):
            folder = repo / "generated" / f"{n // 1000:03d}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"module_{n:05d}.py").write_text(f"VALUE_{n} = {n}\n")
        (repo / "generated" / "000" / "module_00007.py").write_text(f"TOKEN = '{TOKEN}'\n")
        subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
        from worker.verdict import secret_scan

        old = old_module("worker/verdict/secret_scan.py", "bench_old_secret_scan")
        return [
            scan_once(way, module, repo, files)
            for way, module in (("before", old), ("after", secret_scan))
        ]


def scan_once(way: str, module: types.ModuleType, repo: Path, files: int) -> dict[str, Any]:
    calls = 0

    def counted(args: Sequence[str], **kwargs: Any) -> str:
        nonlocal calls
        calls += 1
        return run_git(args, **kwargs)

    module.__dict__["run_git"] = counted  # the scan's git runner, counting
    started = time.perf_counter()
    scanner: Callable[..., Any] = module.SecretScanner
    findings = scanner(Redactor([TOKEN])).scan_change(repo, "HEAD")
    seconds = time.perf_counter() - started
    return {"way": way, "files": files, "s": seconds, "git": calls, "findings": len(findings)}


def call_rows(calls: int) -> tuple[str, dict[str, float]]:
    """How this host bounds a call, and the median ms of a sandboxed `true` through
    run_process as it was (no limits) and as it is, alternating call by call."""
    from worker.confine.limits import process_mechanism
    from worker.confine.processes import run_process
    from worker.confine.sandbox import SandboxMode, make_sandbox

    sandbox = make_sandbox(SandboxMode.ON)
    assert sandbox is not None
    before = old_module("worker/confine/processes.py", "bench_old_processes").run_process
    times: dict[str, list[float]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="reqdrive-bench-calls-") as tmp:
        for _ in range(calls):
            for way, run in (("before", before), ("after", run_process)):
                started = time.perf_counter()
                run(
                    ["true"],
                    cwd=Path(tmp),
                    env={"PATH": "/usr/bin:/bin"},
                    timeout_s=30,
                    log_path=Path(tmp) / "call.log",
                    redactor=Redactor(),
                    sandbox=sandbox,
                )
                times[way].append((time.perf_counter() - started) * 1000)
    return process_mechanism().name, {way: statistics.median(t) for way, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=("junit", "scan", "calls"))
    parser.add_argument("--measure-junit", nargs=2, metavar=("WAY", "REPORT"))
    args = parser.parse_args(argv)
    if args.measure_junit:
        print(json.dumps(measure_junit(args.measure_junit[0], Path(args.measure_junit[1]))))
        return 0
    if args.only in (None, "junit"):
        print("| reader | report | cases | peak RSS growth MiB | s | per-test results |")
        print("| --- | ---: | ---: | ---: | ---: | --- |")
        for row in junit_rows(100_000 if args.quick else 1_000_000):
            results = row["tests"] if row["problem"] is None else row["problem"]
            print(
                f"| {row['way']} | {row['bytes'] / 1e6:.1f} MB | {row['cases']:,} | "
                f"{row['rss_mib']:.0f} | {row['s']:.2f} | {results} |"
            )
    if args.only in (None, "scan"):
        print("\n| secret scan | files added | git processes | s | findings |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for row in scan_rows(2_000 if args.quick else 20_000):
            print(
                f"| {row['way']} | {row['files']:,} | {row['git']:,} | {row['s']:.1f} | "
                f"{row['findings']} |"
            )
    if args.only in (None, "calls"):
        calls = 10 if args.quick else 60
        mechanism, medians = call_rows(calls)
        print(f"\n| a sandboxed `true` through run_process, {calls} calls each | median ms |")
        print("| --- | ---: |")
        print(f"| before (no limits) | {medians['before']:.1f} |")
        print(f"| after (limits by {mechanism}) | {medians['after']:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
