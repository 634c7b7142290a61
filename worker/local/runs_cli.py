"""`reqdrive runs` and `reqdrive discard RUN`: the runs of a work dir, listed or removed."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from worker.confine.redact import Redactor
from worker.exceptions import PreflightError, ReqdriveError
from worker.git.cache import RepositoryCache
from worker.git.run_branches import release_run, remote_refs, update_remote_refs
from worker.local.checkout import repo_root
from worker.local.exit_codes import ExitCode, exit_code_for
from worker.local.repo_cli import work_dir_for
from worker.local.run_start import KEPT_REF
from worker.local.runs import RunLine, list_runs, read_run, render_list, run_folder
from worker.report.run_folder import RunFolder
from worker.run.context import RunPlaces
from worker.run.resume import stop_leftovers


def runs_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="reqdrive runs",
        description="The runs of the work dir, newest first, one line each: id, state (ready, "
        "draft, cancelled, failed, running or stopped), requirement, branch, last change.",
    )
    parser.add_argument("--json", action="store_true", help="print the runs as a JSON list")
    parser.add_argument("--work-dir", type=Path, help="default $REQDRIVE_WORK_DIR or .reqdrive")
    args = parser.parse_args(argv)
    try:
        runs = list_runs(work_dir_for(args.work_dir, os.environ) / "runs")
    except ReqdriveError as error:
        print(f"reqdrive runs: {error}", file=sys.stderr)
        return int(exit_code_for(error))
    if args.json:
        print(json.dumps([run.to_json() for run in runs], indent=2))
    else:
        print("\n".join(render_list(runs)))
    return int(ExitCode.SUCCESS)


def discard_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="reqdrive discard",
        description="Remove a run that is over: its branch (in this checkout and in the cache), "
        "the head kept from it, its worktree and spares, and its run folder. A running run is "
        "refused. Run it in the checkout the run was started in.",
    )
    parser.add_argument("run_id", metavar="RUN", help="the run id (reqdrive runs lists them)")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument("--work-dir", type=Path, help="default $REQDRIVE_WORK_DIR or .reqdrive")
    args = parser.parse_args(argv)
    try:
        work_dir = work_dir_for(args.work_dir, os.environ)
        run = read_run(run_folder(work_dir / "runs", args.run_id))
        if run.held_by is not None:
            raise PreflightError(
                f"run {run.run_id} is running (pid {run.held_by}); stop it before discarding it"
            )
        if not args.yes and not _confirmed(run):
            print("reqdrive discard: nothing removed", file=sys.stderr)
            return int(ExitCode.USER_ABORT)
        for line in discard(run, work_dir, repo_root(Path.cwd())):
            print(line)
    except ReqdriveError as error:
        print(f"reqdrive discard: {error}", file=sys.stderr)
        return int(exit_code_for(error))
    return int(ExitCode.SUCCESS)


def _confirmed(run: RunLine) -> bool:
    if not sys.stdin.isatty():
        raise PreflightError(
            f"discarding run {run.run_id} removes its branch and folder; no terminal to ask on, "
            "so pass --yes"
        )
    what = f"branch {run.branch}, " if run.branch else ""
    answer = input(f"discard run {run.run_id} ({run.status}): {what}worktree and folder? [y/N] ")
    return answer.strip().lower() in {"y", "yes"}


def discard(run: RunLine, work_dir: Path, checkout: Path) -> list[str]:
    """Remove the run under its own lock; what was removed (and kept), one line each."""
    folder = work_dir / "runs" / run.run_id
    cache = RepositoryCache(work_dir / "cache", environment=os.environ)
    remote = str(checkout)  # `reqdrive run` pushes back to the checkout it was started in
    said = []
    with RunFolder(folder, Redactor()).lock():
        stop_leftovers(cache.worktrees_dir / run.run_id)
        if run.branch:
            said += _discard_refs(cache, remote, run)
        release_run(cache, remote, run.run_id, run.branch, keep=False)
        # The folders the pipeline keeps per run beside the run folder: none left behind.
        RunPlaces.of(work_dir, run.run_id).scratch.remove()
        shutil.rmtree(folder)
    return [*said, f"discarded run {run.run_id}: its worktree and run folder are removed"]


def _discard_refs(cache: RepositoryCache, remote: str, run: RunLine) -> list[str]:
    """Delete the run's branch where it still holds the run's work, and its kept head."""
    branch, kept = f"refs/heads/{run.branch}", KEPT_REF.format(run_id=run.run_id)
    now = remote_refs(cache, remote, [branch, kept])
    changes: dict[str, tuple[str | None, str | None]] = {}
    said = []
    if branch in now and now[branch] == run.head_sha:
        changes[branch] = (run.head_sha, None)
        said.append(f"deleted branch {run.branch} in {remote}")
    elif branch in now:
        said.append(f"kept branch {run.branch}: it holds another run's work now")
    if kept in now:
        changes[kept] = (now[kept], None)
        said.append(f"deleted {kept}")
    if changes:
        update_remote_refs(cache, remote, changes)
    return said
