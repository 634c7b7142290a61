"""`reqdrive run`: the engine on a local checkout, with live progress on the console."""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from worker.confine.redact import Redactor
from worker.confine.sandbox import SandboxMode
from worker.exceptions import ReqdriveError
from worker.local.config_drift import FROM_WORKTREE_OPTION
from worker.local.exit_codes import ExitCode, exit_code_for, run_exit_code
from worker.local.plan_output import print_plan, run_command
from worker.local.run_start import prepare_start
from worker.local.spec_from_args import spec_from
from worker.model.state import RunResult
from worker.report.console import ConsoleReporter
from worker.report.protocol import Reporter
from worker.report.run_folder import PRD_JSON
from worker.run.checkpoint_file import FileCheckpointStore
from worker.run.pipeline import Pipeline


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
        spec = spec_from(args, plan_only=plan_only)
        if args.continue_run:  # its plan and the results the edit leaves as they were
            spec = dataclasses.replace(spec, previous_run=args.continue_run)
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


if __name__ == "__main__":
    sys.exit(main())
