"""Bounds on one agent call or gate: processes, memory, file size, disk, reports, scan time."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path

import psutil

LOG = logging.getLogger(__name__)
MIB = 1024 * 1024
CGROUP_CONTROLLERS = ("pids", "memory")
# The shell that moves itself into the call's cgroups, then becomes the call: the kernel then
# counts every process the call starts, from its first one, against the call's limits.
JOIN_SCRIPT = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 126; shift; n=$((n-1)); done; '
    'exec "$@"'
)
# A call's cgroup is removed once its processes are gone: the sandbox's PID namespace is torn
# down a moment after bwrap exits, so the first try usually fails. Pauses double from 1 ms
# (each call would otherwise wait one long pause), up to about 2 s in all.
REMOVE_TRIES = 16
REMOVE_FIRST_PAUSE_S = 0.001
REMOVE_MAX_PAUSE_S = 0.25


@dataclass(frozen=True)
class ResourceLimits:
    """What one run may use; each field is set by the variable LIMIT_VARIABLES names."""

    pids: int = 1024  # processes (and threads) of one call at once
    memory_mib: int = 4096  # memory of one call, all its processes together
    file_mib: int = 4096  # the largest file a call may write (RLIMIT_FSIZE)
    disk_free_mib: int = 1024  # free space the work dir must have before a run and an attempt
    disk_quota_mib: int = 10240  # the run's folders together, checked after every call
    report_mib: int = 32  # a JUnit report the worker reads
    report_cases: int = 100_000  # test cases in one report
    scan_deadline_s: float = 300.0  # the secret scan of one story's change

    def __post_init__(self) -> None:
        for item in fields(self):
            if not getattr(self, item.name) > 0:
                raise ValueError(f"{LIMIT_VARIABLES[item.name]} must be a positive number")


DEFAULT_LIMITS = ResourceLimits()
LIMIT_VARIABLES = {
    "pids": "REQDRIVE_LIMIT_PIDS",
    "memory_mib": "REQDRIVE_LIMIT_MEMORY_MIB",
    "file_mib": "REQDRIVE_LIMIT_FILE_MIB",
    "disk_free_mib": "REQDRIVE_DISK_FREE_MIB",
    "disk_quota_mib": "REQDRIVE_DISK_QUOTA_MIB",
    "report_mib": "REQDRIVE_REPORT_MAX_MIB",
    "report_cases": "REQDRIVE_REPORT_MAX_CASES",
    "scan_deadline_s": "REQDRIVE_SCAN_DEADLINE_S",
}


def limits_from(variables: Mapping[str, str]) -> ResourceLimits:
    """The limits these variables set (the rest at their defaults); ValueError names a bad one."""
    given: dict[str, float] = {}
    for name, variable in LIMIT_VARIABLES.items():
        text = (variables.get(variable) or "").strip()
        if not text:
            continue
        kind = float if name == "scan_deadline_s" else int
        try:
            given[name] = kind(text)
        except ValueError:
            raise ValueError(f"{variable} must be a positive number, not {text!r}") from None
    return ResourceLimits(**given)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Mechanism:
    """How this host bounds a call: cgroups (one folder per controller) or rlimits."""

    name: str  # "cgroup v2", "cgroup v1", "rlimit" or "none"
    parents: tuple[tuple[str, Path], ...] = ()  # (controller, folder a call's cgroup goes in)
    prlimit: str | None = None
    shell: str = "/bin/sh"


@dataclass(frozen=True)
class CallLimits:
    """The argv prefix that starts one call under its limits, and how they are enforced."""

    prefix: tuple[str, ...]
    mechanism: str


@contextlib.contextmanager
def call_limits(
    limits: ResourceLimits, *, uid: int | None = None, mechanism: Mechanism | None = None
) -> Iterator[CallLimits]:
    """The limits of one call: in a cgroup of its own where the host lets the worker make one,
    else rlimits (`mechanism`: what process_mechanism found). `uid` is the real uid the
    call's processes run as (the worker's by default): RLIMIT_NPROC counts all of that uid's
    processes, so the call's allowance is added to what the uid already runs; the limit
    bounds only the call's own forks, never the worker's."""
    mechanism = mechanism or process_mechanism()
    file_limit = [f"--fsize={limits.file_mib * MIB}", "--core=0"]
    if mechanism.prlimit is None:
        yield CallLimits((), mechanism.name)
        return
    if not mechanism.parents:
        nproc = _running_tasks(os.getuid() if uid is None else uid) + limits.pids
        memory = f"--data={limits.memory_mib * MIB}"
        prefix = (mechanism.prlimit, f"--nproc={nproc}", memory, *file_limit, "--")
        yield CallLimits(prefix, mechanism.name)
        return
    groups = _make_groups(mechanism, limits)
    try:
        procs = [str(group / "cgroup.procs") for group in groups]
        join = (mechanism.shell, "-c", JOIN_SCRIPT, "reqdrive-limits", str(len(procs)), *procs)
        yield CallLimits((mechanism.prlimit, *file_limit, "--", *join), mechanism.name)
    finally:
        for group in groups:
            _remove_group(group)


@functools.cache
def process_mechanism() -> Mechanism:
    """What this host allows, found once and logged once per worker process."""
    prlimit = shutil.which("prlimit", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if prlimit is None:
        LOG.warning("calls run without process limits: prlimit (util-linux) is not installed")
        return Mechanism("none")
    found = _cgroup_parents()
    if found is not None:
        name, parents = found
        _remove_left_behind(folder for _, folder in parents)
        LOG.info("calls are bounded by a cgroup each", extra={"limits": name})
        return Mechanism(name, parents, prlimit)
    LOG.info(
        "calls are bounded by rlimits: no writable cgroup with pids and memory here",
        extra={"limits": "rlimit"},
    )
    return Mechanism("rlimit", (), prlimit)


def _cgroup_parents() -> tuple[str, tuple[tuple[str, Path], ...]] | None:
    """Where this process may make cgroups with the pids and memory controllers, or None."""
    mounts = _cgroup_mounts()
    own = _own_cgroups()
    unified = mounts.get("")
    if unified is not None and "" in own:
        folder = unified / own[""].lstrip("/")
        enabled = _words(folder / "cgroup.subtree_control")
        if set(CGROUP_CONTROLLERS) <= enabled and _can_make_group(folder):
            return "cgroup v2", tuple((c, folder) for c in CGROUP_CONTROLLERS)
    parents = []
    for controller in CGROUP_CONTROLLERS:
        mount = mounts.get(controller)
        if mount is None or controller not in own:
            return None
        folder = mount / own[controller].lstrip("/")
        if not _can_make_group(folder):
            return None
        parents.append((controller, folder))
    return "cgroup v1", tuple(parents)


def _cgroup_mounts() -> dict[str, Path]:
    """Mount points by controller ("" for the unified cgroup v2 hierarchy)."""
    mounts: dict[str, Path] = {}
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as table:
        for line in table:
            left, _, right = line.partition(" - ")
            kind, _, options = [*right.split(), "", "", ""][:3]
            point = Path(left.split()[4])
            if kind == "cgroup2":
                mounts.setdefault("", point)
            elif kind == "cgroup":
                for option in options.split(","):
                    if option in CGROUP_CONTROLLERS:
                        mounts.setdefault(option, point)
    return mounts


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path by controller ("" for cgroup v2)."""
    own: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as table:
        for line in table:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                own[controller] = path
    return own


def _words(path: Path) -> set[str]:
    try:
        return set(path.read_text().split())
    except OSError:
        return set()


def _can_make_group(folder: Path) -> bool:
    probe = folder / f"reqdrive-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
    except OSError:
        return False
    _remove_group(probe)
    return True


def _make_groups(mechanism: Mechanism, limits: ResourceLimits) -> list[Path]:
    """One cgroup per controller folder (one in all for v2), its limits written."""
    name = f"reqdrive-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    settings = {
        "pids.max": str(limits.pids),
        "memory.max": str(limits.memory_mib * MIB),  # v2
        "memory.limit_in_bytes": str(limits.memory_mib * MIB),  # v1
        "memory.swap.max": "0",  # v2: no swap either, where the host has any
    }
    groups: list[Path] = []
    try:
        for folder in dict.fromkeys(parent for _, parent in mechanism.parents):
            group = folder / name
            group.mkdir()
            groups.append(group)
            for file, value in settings.items():
                if (group / file).exists():
                    (group / file).write_text(value)
    except OSError:
        for group in groups:
            _remove_group(group)
        raise
    return groups


def _remove_left_behind(folders: Iterable[Path]) -> None:
    """Remove the empty cgroups of calls whose worker is gone (killed before it removed them);
    one still holding a process stays."""
    for folder in dict.fromkeys(folders):
        for group in folder.glob("reqdrive-*"):
            owner = group.name.split("-")[1]
            if owner.isdigit() and not psutil.pid_exists(int(owner)):
                with contextlib.suppress(OSError):
                    group.rmdir()


def _remove_group(group: Path) -> None:
    pause = REMOVE_FIRST_PAUSE_S
    for _ in range(REMOVE_TRIES):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # a process of the call still exiting
            time.sleep(pause)
            pause = min(pause * 2, REMOVE_MAX_PAUSE_S)
    LOG.warning("a call's cgroup could not be removed", extra={"cgroup": str(group)})


def _running_tasks(uid: int) -> int:
    """Processes and threads this real uid runs now: what RLIMIT_NPROC counts."""
    count = 0
    for process in psutil.process_iter(["uids", "num_threads"]):
        uids, threads = process.info["uids"], process.info["num_threads"]
        if uids is not None and uids.real == uid:
            count += threads or 1
    return count
