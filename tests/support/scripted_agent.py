#!/usr/bin/env python3
"""A stand-in coding agent: follows the prompt contract and does what a scenario file says.

Started by the `command` runner, e.g.
    python tests/support/scripted_agent.py --scenario S.json \
        --prompt {prompt_file} --run-dir {run_dir}

It is stateless like a real agent: the story, attempt and phase come from the prompt ("Story
ID:", "Attempt:", "Phase:", "Planning attempt:"). The scenario (JSON):

    {"plan": [{...attempt 1...}, {...attempt 2...}],      # the last entry repeats
     "stories": {"US-001": [{...attempt 1...}, ...]},     # the last entry repeats
     "calls_log": "/abs/calls.log"}                       # optional: one line per call

calls_log may name variables ("$HOME/calls.log": the run's own HOME, which a sandboxed agent
can write, unlike the test's folders).

An attempt's steps, in this order: sleep, sleep_once (with once_file), print, dump_env,
write {path: text}, delete [paths], run (argv, in the worktree), list_files (a file to write
the worktree's file list to, ignored files included), prd (object, planning: written as
run_dir/prd.json) or prd_raw (text), claim_passes, commit (message), hang (seconds; also
starts a `setsid` child; pids go to pids_file), exit_code.

Phases (`tests: first`, the default, makes two calls per story attempt: "Phase: tests", then
"Phase: implement"; `tests: together` makes one, "Phase: together"). A story's attempt entry
may name its steps per phase, `{"tests": {steps}, "implement": {steps}}` (a phase it leaves
out does nothing). A plain entry is split between the two calls: the tests call performs
only its `write`s and `delete`s of test-side paths (TEST_PATH_RE: under a tests/, test/ or
__tests__/ folder, test_*.py, *_test.py, conftest.py, *.test.*, *.spec.*, *_test.go); the
implement call performs everything else (every other step, and the other writes and
deletes). In "together" (or with no Phase line) it performs the whole entry, as before. The
call's label (calls_log, and the first line it prints) ends in " tests" for a tests call.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

STORY_RE = re.compile(r"^Story ID: (\S+)$", re.MULTILINE)
ATTEMPT_RE = re.compile(r"^Attempt: (\d+)", re.MULTILINE)
PLAN_ATTEMPT_RE = re.compile(r"^Planning attempt: (\d+)", re.MULTILINE)
PHASE_RE = re.compile(r"^Phase: (\w+)", re.MULTILINE)
TEST_PATH_RE = re.compile(
    r"(^|/)(tests?|__tests__)/|(^|/)(test_[^/]*\.py|[^/]*_test\.py|conftest\.py)$"
    r"|\.(test|spec)\.[^/]+$|_test\.go$"
)
PHASE_KEYS = ("tests", "implement")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", type=Path, required=True)
    parser.add_argument("--prompt", type=Path, required=True)
    parser.add_argument("--run-dir", type=Path, required=True)
    args = parser.parse_args()
    scenario = json.loads(args.scenario.read_text())
    prompt = args.prompt.read_text()
    story = STORY_RE.search(prompt)
    if story:
        attempt = int(_search(ATTEMPT_RE, prompt))
        entry = _pick(scenario.get("stories", {}).get(story.group(1), [{}]), attempt)
        phase = PHASE_RE.search(prompt)
        steps = for_phase(entry, phase.group(1) if phase else "together")
        label = f"{story.group(1)} {attempt}" + (
            " tests" if phase and phase.group(1) == "tests" else ""
        )
    else:
        attempt = int(_search(PLAN_ATTEMPT_RE, prompt))
        steps = _pick(scenario.get("plan", [{}]), attempt)
        label = f"plan {attempt}"
    if scenario.get("calls_log"):
        with open(os.path.expandvars(scenario["calls_log"]), "a") as log:
            log.write(f"{label} pid={os.getpid()}\n")
    print(f"scripted agent: {label}", flush=True)
    return perform(steps, run_dir=args.run_dir, story_id=story.group(1) if story else None)


def _search(pattern: re.Pattern[str], text: str) -> str:
    match = pattern.search(text)
    if match is None:
        sys.exit(f"scripted agent: the prompt has no {pattern.pattern!r}")
    return match.group(1)


def _pick(entries: list[dict[str, Any]], attempt: int) -> dict[str, Any]:
    return entries[min(attempt, len(entries)) - 1] if entries else {}


def for_phase(entry: dict[str, Any], phase: str) -> dict[str, Any]:
    """The steps of this call: a phase's own, or its share of a plain entry (see above)."""
    if any(key in entry for key in PHASE_KEYS):
        if phase == "together":  # one call does both phases' steps
            tests, code = entry.get("tests", {}), entry.get("implement", {})
            return {**tests, **code, "write": {**tests.get("write", {}), **code.get("write", {})}}
        return dict(entry.get(phase, {}))
    if phase == "tests":
        return {
            "write": {k: v for k, v in entry.get("write", {}).items() if TEST_PATH_RE.search(k)},
            "delete": [k for k in entry.get("delete", []) if TEST_PATH_RE.search(k)],
        }
    if phase == "implement":
        return {
            **entry,
            "write": {
                k: v for k, v in entry.get("write", {}).items() if not TEST_PATH_RE.search(k)
            },
            "delete": [k for k in entry.get("delete", []) if not TEST_PATH_RE.search(k)],
        }
    return entry


def perform(steps: dict[str, Any], *, run_dir: Path, story_id: str | None) -> int:
    cwd = Path.cwd()
    if "sleep" in steps:
        time.sleep(float(steps["sleep"]))
    if "sleep_once" in steps:  # only the first call that sees no once_file sleeps
        once = Path(steps["once_file"])
        if not once.exists():
            once.touch()
            time.sleep(float(steps["sleep_once"]))
    if "print" in steps:
        print(steps["print"], flush=True)
    if "dump_env" in steps:
        Path(steps["dump_env"]).write_text(json.dumps(dict(os.environ), indent=1))
    for name, text in steps.get("write", {}).items():
        target = cwd / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    for name in steps.get("delete", []):
        (cwd / name).unlink()
    if "run" in steps:
        subprocess.run(steps["run"], cwd=cwd, check=False)
    if "list_files" in steps:
        files = sorted(str(p.relative_to(cwd)) for p in cwd.rglob("*") if p.is_file())
        listed = [name for name in files if name != ".git"]
        Path(steps["list_files"]).write_text("\n".join(listed) + "\n")
    if "prd" in steps:
        (run_dir / "prd.json").write_text(json.dumps(steps["prd"], indent=2))
    if "prd_raw" in steps:
        (run_dir / "prd.json").write_text(steps["prd_raw"])
    if steps.get("claim_passes") and story_id:
        _claim_passed(run_dir / "prd.json", story_id)
    if "commit" in steps:
        subprocess.run(["git", "add", "-A"], cwd=cwd, check=True)
        subprocess.run(["git", "commit", "-q", "-m", steps["commit"]], cwd=cwd, check=True)
    if "hang" in steps:
        _hang(float(steps["hang"]), Path(steps["pids_file"]))
    return int(steps.get("exit_code", 0))


def _claim_passed(prd_path: Path, story_id: str) -> None:
    prd = json.loads(prd_path.read_text())
    for story in prd["userStories"]:
        if story["id"] == story_id:
            story["passes"] = True
    prd_path.write_text(json.dumps(prd))
    print("<promise>COMPLETE</promise>", flush=True)


def _hang(seconds: float, pids_file: Path) -> None:
    # A child in a new session, as Claude Code starts its shell commands: outside our group.
    # setsid execs in place when its caller is no group leader, so the pid is the sleeper's.
    child = subprocess.Popen(["setsid", "sleep", str(seconds)])
    pids_file.write_text(f"{os.getpid()}\n{child.pid}\n")
    time.sleep(seconds)


if __name__ == "__main__":
    sys.exit(main())
