"""The setup step: the repository's `setup` command run in its worktree, cached by lockfile."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import stat
import subprocess
from pathlib import Path

from worker.confine.disk import over_quota
from worker.confine.gate_homes import own_home
from worker.confine.processes import run_process
from worker.confine.safe_paths import (
    LinkError,
    fresh_folder,
    open_under,
    remove_tree,
    remove_under,
)
from worker.exceptions import SetupFailed
from worker.git.runner import run_git
from worker.model.gates import GateResult, GateSpec
from worker.model.repo_config import DEFAULT_SETUP_CACHE
from worker.run.calls import setup_sandbox, sweep_leftovers
from worker.run.context import RunContext
from worker.run.setup_made import real_folder, setup_folders

SETUP = "setup"  # its log is the run folder's setup.log; the console names it so
SETUP_TIMEOUT_S = 1800.0
# In a saved entry, beside its folders: the worktree they were made in, whose path their
# scripts and editable installs hold.
ORIGIN = ".reqdrive-origin"
RELOCATED_MAX_BYTES = 1 << 20  # larger files (bundles, data) are left as they are
TAIL_LINES = 20  # of a failed setup's output, in the run's error


def set_up(ctx: RunContext) -> None:
    """Restore the cached folders and run `setup`; save them when it passed. SetupFailed
    (with the exit code and the end of the output) when it did not.

    The setup runs even when its folders were restored: an editable install and a venv's
    scripts hold the worktree's absolute path, which is new every run. The restored copy's
    paths are made this worktree's first (a `.venv/bin/pip` naming another run's python
    cannot start), and the setup then installs this worktree's code."""
    command = ctx.config.setup
    if not command:
        return
    worktree = ctx.git.path
    folders = cache_folders(worktree, ctx.config.setup_cache)
    # The usual setup folders too, cached or not: the clean-up after each check would
    # remove an untracked `.venv` a setup made without a key file init knows.
    exclude_from_git(worktree, list(dict.fromkeys([*folders, *setup_folders(ctx)])))
    key = cache_key(worktree, command, folders, ctx.gate_env.get("PATH", ""))
    saved = ctx.spec.work_dir / "setup-cache" / key
    restored = [name for name in folders if _copy(saved, name, worktree, name)]
    if restored:
        relocate(saved, worktree, restored)
        ctx.folder.append_progress(f"setup cached: {', '.join(restored)} restored (key {key[:12]})")
    failure = _run(ctx, command)
    if ctx.cancel.is_set():
        return  # the baseline step says the run was cancelled; nothing half-made is kept
    if failure is not None:
        raise SetupFailed(failure)
    ctx.git.keep_setup(setup_folders(ctx))
    # Saved only from the base commit: a resumed run's worktree holds the agent's commits, and
    # what its setup made (a planted .pth, a patched package) would reach later runs' checks
    # under the same key.
    if folders and not restored and ctx.git.head() == ctx.cp.base_sha:
        _save(saved, worktree, list(folders))


def cache_folders(worktree: Path, configured: dict[str, list[str]] | None) -> dict[str, list[str]]:
    """The folders to cache and their key files: as configured, else each ecosystem's whose
    key files the repository has."""
    if configured is not None:
        return configured
    names = os.listdir(worktree)
    return {
        folder: list(globs)
        for folder, globs in DEFAULT_SETUP_CACHE.items()
        if any(fnmatch.filter(names, g) for g in globs)
    }


def cache_key(worktree: Path, command: str, folders: dict[str, list[str]], path: str) -> str:
    """sha256 of the command, the folders, their key files' names and content (a key file
    that is a link, or behind one, counts as absent: it is never followed) and the PATH the
    setup finds its interpreter on (a venv is made for one)."""
    names = sorted(os.listdir(worktree))
    files: dict[str, str] = {}
    for globs in folders.values():
        for name in (n for n in names if any(fnmatch.fnmatch(n, g) for g in globs)):
            files[name] = _digest(worktree, name)
    key = {"command": command, "folders": folders, "files": files, "path": path}
    text = json.dumps(key, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def exclude_from_git(worktree: Path, folders: list[str]) -> None:
    """The setup's folders are no story's change: named in the repository's info/exclude
    (once), so no commit and no clean of the gates' leftovers takes them, whether or not
    its .gitignore names them."""
    if not folders:
        return
    where = run_git(
        ["rev-parse", "--path-format=absolute", "--git-path", "info/exclude"], cwd=worktree
    )
    exclude = Path(where)
    exclude.parent.mkdir(parents=True, exist_ok=True)
    known = exclude.read_text(encoding="utf-8").splitlines() if exclude.is_file() else []
    missing = [f"/{folder}" for folder in folders if f"/{folder}" not in known]  # links too
    if missing:
        with exclude.open("a", encoding="utf-8") as file:
            file.write("".join(f"{line}\n" for line in missing))


def _digest(worktree: Path, name: str) -> str:
    try:
        descriptor = open_under(worktree, name)
    except (LinkError, OSError):
        return "absent"
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            return "absent"
        return hashlib.file_digest(file, "sha256").hexdigest()


def _run(ctx: RunContext, command: str) -> str | None:
    """Run the setup in the checks' sandbox; None when it passed, else why it failed."""
    log_path = ctx.folder.path / f"{SETUP}.log"
    log_path.unlink(missing_ok=True)
    shown = ctx.redactor.redact(command)
    # Said on the console as a check run of its own (the App's reporters show none).
    ctx.reporter.gates_started(SETUP, [GateSpec(name=SETUP, command=shown)])
    with own_home(ctx.places.gate_home, ctx.gate_env, setup_sandbox(ctx)) as (env, sandbox):
        outcome = run_process(
            ["bash", "-c", command],
            cwd=ctx.git.path,
            env=env,
            timeout_s=SETUP_TIMEOUT_S,
            log_path=log_path,
            redactor=ctx.redactor,
            cancel=ctx.cancel,
            sandbox=sandbox,
        )
    passed = outcome.exit_code == 0
    said = GateResult(
        name=SETUP,
        command=shown,
        passed=passed,
        exit_code=outcome.exit_code,
        timed_out=outcome.timed_out,
        duration_s=outcome.duration_s,
    )
    ctx.reporter.gates_finished(SETUP, [said], outcome.duration_s)
    sweep_leftovers(ctx)
    ctx.git.secure()  # the setup ran the repository's build scripts
    if passed and (over := over_quota([ctx.git.path], ctx.spec.limits)):
        ctx.folder.append_progress(f"setup: `{shown}` filled the disk quota")
        return f"the setup `{shown}` passed, but {over.split(' after ')[0]}"
    if passed:
        ctx.folder.append_progress(f"setup: `{shown}` passed in {outcome.duration_s:.1f}s")
        return None
    ended = "timed out" if outcome.timed_out else f"exit {outcome.exit_code}"
    tail = "\n".join(outcome.output_tail.rstrip().splitlines()[-TAIL_LINES:])
    why = f"the setup `{shown}` failed ({ended}); its output ends:\n{tail}"
    ctx.folder.append_progress(f"setup: `{shown}` failed ({ended})")
    return why


def _copy(source_root: Path, source: str, target_root: Path, target: str) -> bool:
    """Copy the folder source_root/source to target_root/target (replaced) with `cp -a`,
    which copies links as links, never what they name; False, with nothing copied, when the
    source is no real folder or a link leads on either way (the setup made them)."""
    if not real_folder(source_root, source):
        return False
    try:
        fresh_folder(target_root, target)  # empty, its way made, refused through a link
    except (LinkError, NotADirectoryError):
        return False
    done = subprocess.run(
        ["cp", "-a", "--no-dereference", f"{source_root / source}/.", str(target_root / target)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        remove_under(target_root, target)
    return done.returncode == 0


def _save(saved: Path, worktree: Path, folders: list[str]) -> None:
    """Keep the setup's folders under the work dir, whole or not at all (a partial copy
    would be restored as if complete)."""
    partial = saved.with_name(saved.name + f".{os.getpid()}.partial")
    remove_tree(partial)
    partial.mkdir(parents=True)
    for name in folders:
        if not _copy(worktree, name, partial, name):
            remove_tree(partial)
            return
    (partial / ORIGIN).write_text(str(worktree), encoding="utf-8")
    try:
        partial.rename(saved)
    except OSError:  # another run saved it first
        remove_tree(partial)


def relocate(saved: Path, worktree: Path, folders: list[str]) -> None:
    """Replace the saved worktree's path with this one in the restored folders' files and
    links (a venv's script shebangs, pyvenv.cfg, activate, an editable install's .pth), as
    `conda` relocates an environment. Links are never followed: each file is opened
    O_NOFOLLOW, and a link's own target is rewritten."""
    try:
        old = (saved / ORIGIN).read_text(encoding="utf-8").encode()
    except OSError:
        return
    new = str(worktree).encode()
    if not old or old == new:
        return
    for name in folders:
        for folder, dirs, files in os.walk(worktree / name, followlinks=False):
            for entry in (*dirs, *files):  # a link to a folder is listed with the folders
                try:
                    _relocate_file(Path(folder) / entry, old, new)
                except OSError:
                    continue  # left as it was: the setup, which runs next, may remake it


def _relocate_file(path: Path, old: bytes, new: bytes) -> None:
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        target = os.fsencode(os.readlink(path))
        if old in target:
            path.unlink()
            os.symlink(target.replace(old, new), path)
        return
    if not stat.S_ISREG(info.st_mode) or info.st_size > RELOCATED_MAX_BYTES:
        return
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as file:
        data = file.read()
    # Text only: a binary (a .pyc's marshalled strings, a .so) holds lengths beside its paths.
    if old in data and b"\0" not in data:  # a new file in place: read-only ones too
        fresh = path.with_name(f"{path.name}.relocating")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with os.fdopen(os.open(fresh, flags, stat.S_IMODE(info.st_mode) & 0o777), "wb") as out:
            out.write(data.replace(old, new))
        os.replace(fresh, path)
