"""`reqdrive run`'s arguments and environment made into a checked RunSpec."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from worker.confine.bytecode_seed import UnsafeSeed, check_private
from worker.confine.limits import ResourceLimits, limits_from
from worker.confine.sandbox import (
    Sandbox,
    SandboxMode,
    SandboxNetwork,
    api_hosts,
    make_sandbox,
    readonly_paths,
    sandbox_choice,
)
from worker.exceptions import PreflightError
from worker.git.runner import run_git
from worker.local.checkout import current_branch, repo_root
from worker.local.config_drift import config_drift, config_from_worktree
from worker.local.requirement_arg import requirement_from
from worker.model.prd import MAX_PRD_BYTES
from worker.model.run_ids import check_run_id
from worker.run.spec import RunSpec

# Environment variables whose values are secrets wherever they appear in output.
SECRET_ENV_RE = re.compile(r"TOKEN|SECRET|PASSWORD|PRIVATE_KEY|API_KEY|REDIS_URL", re.IGNORECASE)


def spec_from(args: argparse.Namespace, *, plan_only: bool = False) -> RunSpec:
    """The run `args` ask for on the checkout the command runs in, checked before it starts."""
    if args.run_id is not None:
        check_run_id(args.run_id)  # before anything is written under the work dir
    root = repo_root(Path.cwd())
    requirement = requirement_from(args.requirement, root)
    base = args.base or current_branch(root)
    if not run_git(
        ["rev-parse", "--verify", "--quiet", f"refs/heads/{base}"],
        cwd=root,
        environment=os.environ,
        check=False,
    ):
        raise PreflightError(f"base branch {base!r} does not exist in {root}")
    override = config_from_worktree(root) if args.config_from_worktree else None
    drift = None if override else config_drift(root, base)
    if drift is not None:
        print(f"reqdrive: warning: {drift.path} {drift.message()}", file=sys.stderr)
    env = dict(os.environ)
    work_dir = args.work_dir or Path(env.get("REQDRIVE_WORK_DIR") or root / ".reqdrive")
    _keep_out_of_git_status(work_dir.resolve(), root.resolve())
    return RunSpec(
        plan_only=plan_only,
        plan_text=_plan_text(getattr(args, "plan", None)),
        run_id=args.run_id or requirement.slug,
        requirement=requirement,
        remote_url=str(root),  # the branch is pushed back to this checkout, never checked out
        work_dir=work_dir.resolve(),
        base_ref=base,
        agent_runner=args.agent,
        agent_command=args.agent_command or env.get("REQDRIVE_AGENT_COMMAND"),
        default_runner=env.get("REQDRIVE_AGENT") or "claude",
        secrets=tuple(v for k, v in env.items() if SECRET_ENV_RE.search(k) and v),
        source_env=env,
        gate_path=args.gate_path or env.get("REQDRIVE_GATE_PATH") or None,
        bytecode_seed=_bytecode_seed(env.get("REQDRIVE_BYTECODE_SEED")),
        limits=_limits(env),
        sandbox=sandbox_from(
            *sandbox_choice(args.sandbox, env.get("REQDRIVE_SANDBOX"), "off"), env=env
        ),
        config_override=override,
    )


def _bytecode_seed(setting: str | None) -> Path | None:
    if not setting:
        return None
    try:
        check_private(Path(setting), whole=True)
    except UnsafeSeed as error:
        raise PreflightError(str(error)) from None
    return Path(setting)


def _limits(env: Mapping[str, str]) -> ResourceLimits:
    try:
        return limits_from(env)
    except ValueError as error:
        raise PreflightError(str(error)) from None


def _plan_text(path: Path | None) -> str | None:
    if path is None:
        return None
    if not path.is_file():
        raise PreflightError(f"plan file {path} not found: give the prd.json to start from")
    with path.open("rb") as handle:  # parse_prd refuses anything this large, by its size
        return handle.read(MAX_PRD_BYTES + 1).decode("utf-8", errors="replace")


def sandbox_from(mode: str, because: str, env: dict[str, str]) -> Sandbox | None:
    """The sandbox asked for, checked; off by default on a developer's machine, and said."""
    if mode not in {m.value for m in SandboxMode}:
        raise PreflightError(f"REQDRIVE_SANDBOX must be on or off, not {mode!r}")
    network = (env.get("REQDRIVE_SANDBOX_NETWORK") or "open").strip().lower()
    if network not in {n.value for n in SandboxNetwork}:
        raise PreflightError(
            f"REQDRIVE_SANDBOX_NETWORK must be open, registries or api, not {network!r}"
        )
    try:
        hosts = api_hosts(env.get("REQDRIVE_SANDBOX_API_HOSTS"))
    except ValueError as error:
        raise PreflightError(f"REQDRIVE_SANDBOX_API_HOSTS: {error}") from None
    readonly = readonly_paths(env.get("REQDRIVE_SANDBOX_READONLY"))
    sandbox = make_sandbox(
        mode, readonly, network=network, api_hosts=hosts, limits=_limits(env), off_because=because
    )
    if sandbox is None:
        print(
            f"reqdrive run: the agent runs unconfined, with your permissions ({because}; "
            "--sandbox on confines it to its worktree)",
            file=sys.stderr,
        )
    return sandbox


def _keep_out_of_git_status(work_dir: Path, root: Path) -> None:
    """A work folder inside the checkout (the default .reqdrive/) ignores itself, so the
    developer's `git status` stays as it was; tracked files there (prompt overrides) stay
    tracked."""
    if not work_dir.is_relative_to(root):
        return
    work_dir.mkdir(parents=True, exist_ok=True)
    ignore = work_dir / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# reqdrive's runs, cache and worktrees\n*\n")
