"""The runs in a work dir, read from their folders: state, stories, attempts, cost, holder, logs."""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
from pydantic import ValidationError

from worker.exceptions import PreflightError
from worker.model.run_ids import check_run_id
from worker.model.state import Checkpoint
from worker.report.run_folder import LOCK_FILE, PROGRESS, RUN_JSON, VERIFICATION_SUMMARY
from worker.report.story_states import plural
from worker.run.checkpoint_file import CHECKPOINT_FILE

# An agent call's log (iteration-3.log, iteration-plan-1.log), not a gate's (iteration-3.tests.log).
AGENT_LOG_RE = re.compile(r"iteration-(?:\d+|plan-\d+)\.log")
# A run in one of these states is over: its step no longer says anything.
FINISHED = frozenset({"ready", "draft", "cancelled"})


@dataclass
class StoryLine:
    id: str
    title: str
    state: str
    attempts: int


@dataclass
class RunLine:
    """One run as `reqdrive status` shows it."""

    run_id: str
    status: str
    step: str
    requirement: str = ""
    branch: str = ""
    cost_usd: float = 0.0
    attempts: int = 0
    held_by: int | None = None  # the pid of a live process holding the run's lock
    stop_reason: str | None = None
    error: str | None = None
    # For a finished or failed run, the one-line reason: why it is a draft, what failed.
    why: str | None = None
    stories: list[StoryLine] = field(default_factory=list)
    # The commit the run last pushed (else its head): whether its branch still holds its work.
    head_sha: str = ""
    updated_at: float = 0.0  # when the run last wrote its state (seconds since the epoch)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def list_runs(runs_dir: Path) -> list[RunLine]:
    """Every run folder, newest first."""
    if not runs_dir.is_dir():
        return []
    folders = [p for p in runs_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
    folders.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return [read_run(p) for p in folders]


def run_folder(runs_dir: Path, run_id: str) -> Path:
    """The folder of one run, its id checked by the rule every command shares."""
    folder = runs_dir / check_run_id(run_id)
    if not folder.is_dir():
        known = ", ".join(sorted(p.name for p in runs_dir.iterdir())) if runs_dir.is_dir() else ""
        raise PreflightError(
            f"no run {run_id} in {runs_dir}" + (f" (runs: {known})" if known else "")
        )
    return folder


def read_run(folder: Path) -> RunLine:
    run_json = _json(folder / RUN_JSON)
    line = RunLine(
        run_id=folder.name,
        status=str(run_json.get("status", "unknown")),
        step=str(run_json.get("step", "")),
        requirement=str(run_json.get("requirement", "")),
        error=run_json.get("error"),
        held_by=holder(folder),
    )
    checkpoint = _checkpoint(folder / CHECKPOINT_FILE)
    if checkpoint is not None:
        line.status, line.step = str(checkpoint.status), str(checkpoint.step)
        line.branch, line.cost_usd = checkpoint.branch, round(checkpoint.cost_usd, 4)
        line.head_sha = checkpoint.pushed_sha or checkpoint.head_sha
        line.stop_reason = checkpoint.stop_reason and str(checkpoint.stop_reason)
        line.error = checkpoint.error or line.error
        line.stories = [
            StoryLine(s.id, s.title, str(s.state), len(s.attempts)) for s in checkpoint.stories
        ]
        line.attempts = sum(s.attempts for s in line.stories)
    written = [
        p.stat().st_mtime for p in (folder / CHECKPOINT_FILE, folder / RUN_JSON) if p.exists()
    ]
    line.updated_at = max(written, default=folder.stat().st_mtime)
    if line.status == "running" and line.held_by is None:
        line.status = "stopped"  # its process is gone: `reqdrive run` with its id resumes it
    _settle(line, _json(folder / VERIFICATION_SUMMARY))
    return line


def _settle(line: RunLine, summary: dict[str, Any]) -> None:
    """A finished run is ready, a draft or cancelled, never just finished; a failed one says why."""
    if line.status == "failed":
        line.why = line.error
    elif line.status == "finished" and line.stop_reason == "cancelled":
        line.status, line.why = "cancelled", f"stopped by request; what passed is on {line.branch}"
    elif line.status == "finished":
        ready = summary.get("ready") is True
        line.status = "ready" if ready else "draft"
        line.why = None if ready else str(summary.get("draft_reason") or "no verdict was written")


def holder(folder: Path) -> int | None:
    """The live process that holds the run's lock, if any (the lock file goes with the run)."""
    lock = folder / LOCK_FILE
    try:
        pid = int(lock.read_text().strip() or 0)
    except (OSError, ValueError):
        return None
    if pid <= 0 or not psutil.pid_exists(pid):
        return None
    with contextlib.suppress(psutil.Error):
        files = {Path(f.path) for f in psutil.Process(pid).open_files()}
        if lock.resolve() not in files:
            return None  # the pid was reused by a process that has nothing to do with the run
    return pid


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _checkpoint(path: Path) -> Checkpoint | None:
    try:
        return Checkpoint.model_validate_json(path.read_text())
    except (OSError, ValidationError):
        return None


def render_runs(runs: list[RunLine], *, detail: bool) -> list[str]:
    if not runs:
        return ["no runs in this work dir"]
    lines = []
    for run in runs:
        held = f", held by pid {run.held_by}" if run.held_by else ""
        passed = sum(s.state == "passed" for s in run.stories)
        state = run.status if run.status in FINISHED else f"{run.status} ({run.step}{held})"
        lines.append(
            f"{run.run_id}: {state}; {passed}/{len(run.stories)} stories passed, "
            f"{plural(run.attempts, 'attempt')}, ${run.cost_usd:.2f}"
        )
        if run.why:
            lines.append(f"  why: {run.why}")
        if detail:
            lines.append(f"  requirement {run.requirement}  branch {run.branch}")
            lines += [
                f"  {s.id} {s.state} ({plural(s.attempts, 'attempt')}) {s.title}"
                for s in run.stories
            ]
            if run.stop_reason:
                lines.append(f"  stopped because {run.stop_reason}")
        if run.error and run.error != run.why:
            lines.append(f"  error: {run.error}")
    return lines


def render_list(runs: list[RunLine]) -> list[str]:
    """`reqdrive runs`: one line per run, newest first: id, state, requirement, branch, when."""
    if not runs:
        return ["no runs in this work dir"]
    rows = [
        (run.run_id, run.status, run.requirement or "-", run.branch or "-", _when(run.updated_at))
        for run in runs
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return [
        "  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[4]])
        for row in rows
    ]


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).astimezone().strftime("%Y-%m-%d %H:%M")


def current_log(folder: Path) -> Path | None:
    """The newest agent call's log (iteration-N.log, plan-N.log)."""
    logs = [p for p in folder.glob("iteration-*.log") if AGENT_LOG_RE.fullmatch(p.name)]
    return max(logs, key=lambda p: p.stat().st_mtime, default=None)


def progress_path(folder: Path) -> Path:
    return folder / PROGRESS
