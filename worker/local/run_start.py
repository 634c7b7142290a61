"""Where a new local run starts: the base, or with --continue an earlier run's branch; a run
that is over never keeps its branch from the next one."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from worker.confine.redact import Redactor
from worker.exceptions import GitError, PreflightError, WorkspaceError
from worker.git.cache import RepositoryCache
from worker.git.run_branches import release_run, remote_refs, runs_on, update_remote_refs
from worker.local.runs import RunLine, list_runs, read_run, run_folder
from worker.report.run_folder import RunFolder
from worker.run.checkpoint_file import CHECKPOINT_FILE
from worker.run.resume import stop_leftovers
from worker.run.spec import RunSpec

# Where the head a run left on its branch is kept when a new run starts that branch afresh
# (and where `reqdrive discard` looks for it).
KEPT_REF = "refs/reqdrive/runs/{run_id}"


def new_branch(spec: RunSpec) -> str:
    """The branch a new run of the requirement works on (the pipeline names it alike)."""
    return f"reqdrive/{spec.requirement.slug}"


def prepare_start(spec: RunSpec, continue_run: str | None, say: Callable[[str], None]) -> None:
    """Before a run: resuming its own checkpoint changes nothing; a new run frees the branch
    from the runs that are over (refusing a live one) and, unless it continues `continue_run`,
    sets the head they left aside under KEPT_REF so the pipeline starts from the base."""
    runs_dir = spec.work_dir / "runs"
    if (runs_dir / spec.run_id / CHECKPOINT_FILE).exists():
        if continue_run not in (None, spec.run_id):
            raise PreflightError(
                f"run {spec.run_id} exists and goes on from its own branch; to continue "
                f"run {continue_run} in a new run, give the new run an id of its own (--run-id)"
            )
        return
    branch = new_branch(spec)
    runs = [run for run in list_runs(runs_dir) if run.run_id != spec.run_id]
    if continue_run is not None:
        earlier = read_run(run_folder(runs_dir, continue_run))
        if earlier.branch != branch:
            raise PreflightError(
                f"run {continue_run} worked on {earlier.branch or 'no branch yet'}, not "
                f"{branch}: --continue goes on from a run of the same requirement"
            )
    cache = RepositoryCache(spec.work_dir / "cache", environment=spec.source_env)
    holders = {run.run_id for run in runs if run.branch == branch}
    holders |= set(runs_on(cache, spec.remote_url, branch))
    for run_id in sorted(holders - {spec.run_id}):
        _release(cache, spec, runs_dir / run_id, branch)
    if continue_run is None:
        _set_aside(cache, spec, [run for run in runs if run.branch == branch], branch, say)


def _release(cache: RepositoryCache, spec: RunSpec, folder: Path, branch: str) -> None:
    """Free a run's checkout of `branch` under the run's own lock: a live run refuses."""
    with ExitStack() as stack:
        if folder.is_dir():  # without a folder no process of the run exists to hold it
            try:
                stack.enter_context(RunFolder(folder, Redactor()).lock())
            except PreflightError as held:
                raise PreflightError(
                    f"{held} on branch {branch}; wait for it to end (or stop it) before "
                    "starting another run of this requirement"
                ) from None
        # A killed run's agent outlives it, writing into the checkout about to be reused.
        stop_leftovers(cache.worktrees_dir / folder.name)
        release_run(cache, spec.remote_url, folder.name, branch, keep=True)


def _set_aside(
    cache: RepositoryCache,
    spec: RunSpec,
    runs: list[RunLine],
    branch: str,
    say: Callable[[str], None],
) -> None:
    """Keep what an earlier run left on `branch` under KEPT_REF and delete the branch, so the
    new run starts from the base and its baseline is the base's."""
    credentials = spec.credentials() if spec.credentials is not None else None
    ref = f"refs/heads/{branch}"
    head = remote_refs(cache, spec.remote_url, [ref], credentials).get(ref)
    if head is None:
        return
    # runs is newest first: the run whose last push is the head, else the newest of the branch.
    owner = next((run for run in runs if run.head_sha == head), runs[0] if runs else None)
    name = owner.run_id if owner else f"{spec.requirement.slug}-{head[:12]}"
    kept = KEPT_REF.format(run_id=name)
    try:
        update_remote_refs(
            cache, spec.remote_url, {kept: (None, head), ref: (head, None)}, credentials
        )
    except GitError as error:  # the push is atomic: nothing changed
        raise WorkspaceError(
            f"{branch} could not be set aside for this run ({error}); if it is checked out in "
            f"{spec.remote_url}, switch to another branch there, or build on it with "
            f"--continue {name}"
        ) from None
    said = f"run {name}'s work" if owner else "earlier work"
    say(
        f"{branch} held {said} ({head[:12]}), now kept as {kept}; this run starts from "
        f"{spec.base_ref or 'the base branch'} (--continue {name} would build on it)"
    )
