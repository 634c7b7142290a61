"""`reqdrive run`: the engine on a local checkout, with live progress on the console."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from enum import IntEnum
from pathlib import Path
from types import FrameType

from worker.confine.limits import ResourceLimits, limits_from
from worker.confine.redact import Redactor
from worker.confine.sandbox import (
    Sandbox,
    SandboxMode,
    SandboxNetwork,
    api_hosts,
    make_sandbox,
    readonly_paths,
    sandbox_choice,
)
from worker.exceptions import (
    AgentError,
    GitError,
    PrdError,
    PreflightError,
    RepoConfigError,
    ReqdriveError,
    ResumeError,
    RunCancelled,
    SandboxUnavailable,
    WorkspaceError,
)
from worker.git.runner import run_git
from worker.local.config_drift import FROM_WORKTREE_OPTION, config_drift, config_from_worktree
from worker.local.plan_output import print_plan, run_command
from worker.local.run_start import prepare_start
from worker.model.prd import MAX_PRD_BYTES
from worker.model.run_ids import check_run_id
from worker.model.slugs import slugify
from worker.model.state import RunResult, StopReason
from worker.report.console import ConsoleReporter
from worker.report.protocol import Reporter
from worker.report.run_folder import PRD_JSON
from worker.run.checkpoint_file import FileCheckpointStore
from worker.run.pipeline import Pipeline
from worker.run.spec import Requirement, RunSpec

# Environment variables whose values are secrets wherever they appear in output.
SECRET_ENV_RE = re.compile(r"TOKEN|SECRET|PASSWORD|PRIVATE_KEY|API_KEY|REDIS_URL", re.IGNORECASE)
# An argument that looks like a file name but names no file is a typo, not requirement text.
PATH_LIKE_RE = re.compile(r"^\S+\.(md|txt|markdown)$|^\S*/\S*$", re.IGNORECASE)
# `REQ-001` (or `REQ-001-export`) alone names a requirement file, never requirement text.
REQUIREMENT_ID_RE = re.compile(r"^REQ-\d+(?:-[\w.-]*)?$", re.IGNORECASE)


class ExitCode(IntEnum):
    """The seeds' exit codes, kept so scripts written for them still work."""

    SUCCESS = 0
    GENERAL_ERROR = 1
    MISSING_DEPENDENCY = 2
    CONFIG_ERROR = 3
    GIT_ERROR = 4
    AGENT_ERROR = 5
    PR_ERROR = 6
    USER_ABORT = 7
    PREFLIGHT_FAILED = 8
    # Not in the seeds: a run that finished with a draft is not a success a script may build on.
    NOT_READY = 9


# One table from failure to exit code; the message is the exception's own sentence.
EXIT_CODES: tuple[tuple[type[ReqdriveError], ExitCode], ...] = (
    (RunCancelled, ExitCode.USER_ABORT),
    (PreflightError, ExitCode.PREFLIGHT_FAILED),
    (RepoConfigError, ExitCode.CONFIG_ERROR),
    (GitError, ExitCode.GIT_ERROR),
    (WorkspaceError, ExitCode.GIT_ERROR),
    (ResumeError, ExitCode.GIT_ERROR),
    (PrdError, ExitCode.AGENT_ERROR),
    (AgentError, ExitCode.AGENT_ERROR),
    (SandboxUnavailable, ExitCode.MISSING_DEPENDENCY),
)


def build_parser(*, plan_only: bool = False) -> argparse.ArgumentParser:
    if plan_only:
        parser = argparse.ArgumentParser(
            prog="reqdrive plan",
            description="Plan a requirement into stories with the agent, as `reqdrive run` "
            "would (same agent and sandbox options), and stop: print the stories and the "
            "tests each owns. `reqdrive run` with the same run id goes on from this plan; "
            "`reqdrive run --plan FILE` starts from a plan you edited.",
        )
        parser.add_argument("--json", action="store_true", help="print prd.json instead")
    else:
        parser = argparse.ArgumentParser(
            prog="reqdrive run",
            description="Plan a requirement into stories, implement them with a coding agent "
            "on branch reqdrive/<slug>, verify every story with the repository's own checks, "
            "and write the pull request body to the run folder. Your working tree is not "
            "touched.",
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help="print the run's outcome as one JSON object on stdout (progress stays on stderr)",
        )
        parser.add_argument(
            "--plan",
            type=Path,
            metavar="FILE",
            help="a reviewed prd.json to start from instead of planning (checked like the agent's)",
        )
    parser.add_argument("requirement", help="a requirement file (REQ-001-x.md) or the text itself")
    parser.add_argument("--agent", choices=["claude", "codex", "aider", "command"])
    parser.add_argument(
        "--agent-command",
        help="template for --agent command, with {prompt_file}, {cwd} and {run_dir} placeholders",
    )
    parser.add_argument("--run-id", help="resume or name a run (default: the requirement's slug)")
    parser.add_argument(
        "--continue",
        dest="continue_run",
        metavar="RUN",
        help="a new run goes on from run RUN's branch (default: from the base; the branch "
        "another run left is kept under refs/reqdrive/runs/<its id>)",
    )
    parser.add_argument(
        "--work-dir", type=Path, help="default $REQDRIVE_WORK_DIR or <repo>/.reqdrive"
    )
    parser.add_argument("--base", help="base branch (default: the branch checked out)")
    parser.add_argument(
        "--sandbox",
        choices=[m.value for m in SandboxMode],
        help="run the agent and the checks in a bubblewrap sandbox (default $REQDRIVE_SANDBOX, "
        "else off on your own machine: the agent can then read what you can)",
    )
    parser.add_argument(
        FROM_WORKTREE_OPTION,
        action="store_true",
        help="use .github/reqdrive.yml as it is in the working tree, not as committed on the "
        "base branch (nothing is committed for it)",
    )
    parser.add_argument(
        "--gate-path",
        help="PATH the checks run with, e.g. .venv/bin:/usr/bin:/bin to pick their python "
        "(default $REQDRIVE_GATE_PATH, else your PATH)",
    )
    return parser


def main(argv: Sequence[str] | None = None, *, plan_only: bool = False) -> int:
    args = build_parser(plan_only=plan_only).parse_args(argv)
    command = "reqdrive plan" if plan_only else "reqdrive run"
    cancel = threading.Event()
    previous = signal.signal(signal.SIGINT, _cancel_on(cancel))
    redactor = Redactor()  # until the run's own, which knows the secret values too
    try:
        spec = _spec(args, plan_only=plan_only)
        prepare_start(
            spec, args.continue_run, lambda line: print(f"{command}: {line}", file=sys.stderr)
        )
        store = FileCheckpointStore(spec.work_dir / "runs")
        # With --json, stdout is the outcome's alone.
        progress = sys.stderr if plan_only or args.json else None
        reporter: Reporter = ConsoleReporter(progress, plan_only=plan_only)
        pipeline = Pipeline(spec, reporter=reporter, checkpoints=store, cancel=cancel)
        redactor = pipeline.redactor
        result = pipeline.run()
    except ReqdriveError as error:
        # Messages quote git's stderr, config values and agent output: redacted like run.json.
        print(f"{command}: {redactor.redact(str(error))}", file=sys.stderr)
        return int(exit_code_for(error))
    finally:
        signal.signal(signal.SIGINT, previous)
    if plan_only:
        return _print_plan(pipeline, result, args.requirement, json_output=args.json)
    code = run_exit_code(result)
    if args.json:
        print(json.dumps(outcome_json(result, code), indent=2))
    return int(code)


def run_exit_code(result: RunResult) -> ExitCode:
    """Ready is success; a run stopped by Ctrl-C or ending in a draft says so to the shell."""
    if result.stop_reason is StopReason.CANCELLED:
        return ExitCode.USER_ABORT
    return ExitCode.SUCCESS if result.ready else ExitCode.NOT_READY


def outcome_json(result: RunResult, code: ExitCode) -> dict[str, object]:
    """What `run --json` prints: the verdict, each story's state, and where the files are."""
    return {
        "run_id": result.run_id,
        "exit_code": int(code),
        "ready": result.ready,
        "draft_reason": result.draft_reason,
        "stop_reason": result.stop_reason.value if result.stop_reason else None,
        "branch": result.branch,
        "base_sha": result.base_sha,
        "head_sha": result.head_sha,
        "stories": [
            {"id": s.id, "title": s.title, "state": s.state.value, "attempts": len(s.attempts)}
            for s in result.stories
        ],
        "still_failing": result.still_failing,
        "cost_usd": result.cost_usd,
        "run_dir": result.run_dir,
    }


def plan_main(argv: Sequence[str]) -> int:
    """`reqdrive plan`: the run's plan step alone."""
    return main(argv, plan_only=True)


def _print_plan(
    pipeline: Pipeline, result: RunResult, requirement: str, *, json_output: bool
) -> int:
    prd_path = pipeline.folder.file(PRD_JSON)
    if not prd_path.exists():  # stopped (Ctrl-C) before the plan was made
        return int(ExitCode.USER_ABORT)
    if json_output:
        print(prd_path.read_text(), end="")
    else:
        source = pipeline.spec.requirement.source
        print_plan(prd_path, result, source, run_command(requirement, pipeline.spec.run_id))
    return int(ExitCode.SUCCESS)


def _cancel_on(cancel: threading.Event) -> Callable[[int, FrameType | None], None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        print("reqdrive run: stopping after the current step (Ctrl-C)", file=sys.stderr)
        cancel.set()

    return handler


def exit_code_for(error: ReqdriveError) -> ExitCode:
    for kind, code in EXIT_CODES:
        if isinstance(error, kind):
            return code
    return ExitCode.GENERAL_ERROR


def _spec(args: argparse.Namespace, *, plan_only: bool = False) -> RunSpec:
    if args.run_id is not None:
        check_run_id(args.run_id)  # before anything is written under the work dir
    root = repo_root(Path.cwd())
    requirement = _requirement(args.requirement, root)
    base = args.base or _current_branch(root)
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
        limits=_limits(env),
        sandbox=_sandbox(
            *sandbox_choice(args.sandbox, env.get("REQDRIVE_SANDBOX"), "off"), env=env
        ),
        config_override=override,
    )


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


def _sandbox(mode: str, because: str, env: dict[str, str]) -> Sandbox | None:
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


def repo_root(cwd: Path) -> Path:
    root = run_git(["rev-parse", "--show-toplevel"], cwd=cwd, environment=os.environ, check=False)
    if not root:
        raise PreflightError(f"{cwd} is not inside a git repository")
    return Path(root)


def _current_branch(root: Path) -> str:
    branch = run_git(
        ["symbolic-ref", "--quiet", "--short", "HEAD"],
        cwd=root,
        environment=os.environ,
        check=False,
    )
    if not branch:
        raise PreflightError("HEAD is detached: pass --base BRANCH")
    return branch


def _requirement(argument: str, root: Path) -> Requirement:
    path = Path(argument)
    if not path.is_absolute():
        path = Path.cwd() / path
    if "\n" not in argument and path.is_file():
        text = path.read_text(errors="replace")
        resolved = path.resolve()
        in_repo = resolved.is_relative_to(root.resolve())
        repo_path = resolved.relative_to(root.resolve()).as_posix() if in_repo else None
        return Requirement(
            text=text, source=repo_path or path.name, slug=slugify(path.stem), repo_path=repo_path
        )
    named = Path(argument.strip())
    if "\n" not in argument and REQUIREMENT_ID_RE.match(named.name):
        # `REQ-001` anywhere in the checkout; `docs/requirements/REQ-001-x` (no .md) there.
        folder = root if named.parent == Path(".") else path.parent
        return _requirement(_file_named(named.name, root, folder), root)
    if PATH_LIKE_RE.match(argument.strip()):
        raise PreflightError(f"requirement file {argument} not found")
    if not argument.strip():
        raise PreflightError("the requirement is empty")
    first_line = argument.strip().splitlines()[0]
    return Requirement(text=argument, source="text", slug=slugify(first_line, max_len=40))


def _file_named(name: str, root: Path, folder: Path) -> str:
    """The one requirement file `REQ-001` (or `REQ-001-x`) names under `folder`: `REQ-001.md`
    or `REQ-001-*.md`, never `REQ-0010-*.md`; or an error listing the choice."""
    top = root.resolve()
    candidates = [*folder.rglob(f"{name}.md"), *folder.rglob(f"{name}-*.md")]
    found = sorted(
        {
            p.resolve().relative_to(top).as_posix()
            for p in candidates
            if p.resolve().is_relative_to(top) and not {".reqdrive", ".git"} & set(p.parts)
        }
    )
    if len(found) == 1:
        print(f"reqdrive: {name} is {found[0]}", file=sys.stderr)
        return str(top / found[0])
    if not found:
        raise PreflightError(
            f"no requirement file named {name}*.md in {folder}: give the file's path "
            "(docs/requirements/REQ-001-name.md) or the requirement's text in quotes"
        )
    raise PreflightError(f"{name} could be any of {', '.join(found)}: give the file's path")


if __name__ == "__main__":
    sys.exit(main())
