"""`reqdrive init`, `validate` and `logs`: set a checkout up for reqdrive, check it, read a run."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from worker.confine.redact import Redactor
from worker.exceptions import ReqdriveError
from worker.local.checkout import repo_root
from worker.local.exit_codes import ExitCode, exit_code_for
from worker.local.init_repo import described, init_repository, project_folder
from worker.local.runs import current_log, holder, progress_path, run_folder
from worker.local.spec_from_args import SECRET_ENV_RE
from worker.local.validate_repo import SEEDS_CONFIG, convert_seeds_config, validate_repository

FOLLOW_INTERVAL_S = 0.5
MAX_CHUNK_BYTES = 4 * 1024 * 1024  # printed per look at a file; the rest comes next time


def init_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="reqdrive init",
        description="Write .github/reqdrive.yml (test and lint commands detected from the "
        "checkout, commented) and a template requirement; nothing is committed.",
    )
    parser.add_argument("--force", action="store_true", help="replace files that exist")
    args = parser.parse_args(argv)
    try:
        root = repo_root(Path.cwd())
        folder = project_folder(root, Path.cwd())
        written, found = init_repository(root, force=args.force, folder=folder)
    except ReqdriveError as error:
        print(f"reqdrive init: {error}", file=sys.stderr)
        return int(exit_code_for(error))
    names = [p.relative_to(root).as_posix() for p in written]
    print(f"reqdrive init: {described(found)}")
    for name in names:
        print(f"  wrote {name}")
    for note in found.notes:
        print(f"  note: {note}")
    if found.setup is not None:
        print(f"  suggested setup, commented out in {names[0]}: {found.setup[0]}")
    print(f"Next: review {names[0]}, write the requirement over the template in {names[1]}")
    print("(validate refuses the template as it is), then")
    print(f"  git add {' '.join(names)} && git commit -m 'reqdrive: configuration'")
    print("  reqdrive validate")
    print(f"  reqdrive plan {names[1]}")
    return int(ExitCode.SUCCESS)


def validate_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="reqdrive validate",
        description="Check the repository's reqdrive config and every REQ-*.md, as they are "
        "in this checkout; each problem on one line naming the file, the key and the fix.",
    )
    parser.add_argument("path", nargs="?", default=".", help="a checkout (default: here)")
    parser.add_argument(
        "--write", action="store_true", help=f"convert a seeds-style {SEEDS_CONFIG} to YAML"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    args = parser.parse_args(argv)
    try:
        root = repo_root(Path(args.path).resolve())
        if args.write:
            target, changes = convert_seeds_config(root)
            print(f"wrote {target.relative_to(root).as_posix()} from {SEEDS_CONFIG}")
            for change in changes:
                print(f"  {change}")
        report = validate_repository(root)
    except ReqdriveError as error:
        print(f"reqdrive validate: {error}", file=sys.stderr)
        return int(exit_code_for(error))
    code = ExitCode.SUCCESS
    if report.config_problems:
        code = ExitCode.CONFIG_ERROR
    elif report.requirement_problems:
        code = ExitCode.PREFLIGHT_FAILED
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return int(code)
    for problem in report.problems:
        print(problem.line(), file=sys.stderr)
    for note in report.notes:
        print(f"note: {note}")
    config = report.config_file or "no config file (defaults)"
    verdict = "ok" if not report.problems else f"{len(report.problems)} problem(s)"
    print(f"{verdict}: {config}, {len(report.requirements)} requirement(s)")
    return int(code)


def work_dir_for(given: Path | None, env: Mapping[str, str]) -> Path:
    """--work-dir, else $REQDRIVE_WORK_DIR, else .reqdrive at the top of this checkout."""
    if given is not None:
        return given.resolve()
    if env.get("REQDRIVE_WORK_DIR"):
        return Path(env["REQDRIVE_WORK_DIR"]).resolve()
    return repo_root(Path.cwd()) / ".reqdrive"


def logs_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="reqdrive logs",
        description="A run's progress and its current agent call's log, redacted.",
    )
    parser.add_argument("run_id", metavar="RUN", help="the run id (reqdrive status lists them)")
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing until it ends")
    parser.add_argument("--work-dir", type=Path, help="default $REQDRIVE_WORK_DIR or .reqdrive")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    redactor = Redactor(tuple(v for k, v in env.items() if SECRET_ENV_RE.search(k) and v))
    try:
        folder = run_folder(work_dir_for(args.work_dir, env) / "runs", args.run_id)
    except ReqdriveError as error:
        print(f"reqdrive logs: {error}", file=sys.stderr)
        return int(exit_code_for(error))
    tail = LogTail(folder, redactor)
    tail.print_new()
    while args.follow and holder(folder) is not None:
        time.sleep(FOLLOW_INTERVAL_S)
        tail.print_new()
    if args.follow:
        tail.print_new()  # what the run wrote as it ended
    return int(ExitCode.SUCCESS)


class LogTail:
    """Prints what progress.txt and the current agent log gained since the last call."""

    def __init__(self, folder: Path, redactor: Redactor) -> None:
        self._folder = folder
        self._redactor = redactor
        self._offsets: dict[Path, int] = {}
        self._shown_log: Path | None = None

    def print_new(self) -> None:
        self._print(progress_path(self._folder), header=None)
        log = current_log(self._folder)
        if log is not None:
            header = None if log == self._shown_log else f"--- {log.name} (the current agent call)"
            self._shown_log = log
            self._print(log, header=header)

    def _print(self, path: Path, *, header: str | None) -> None:
        if not path.is_file():
            return
        with path.open("rb") as handle:
            handle.seek(self._offsets.get(path, 0))
            data = handle.read(MAX_CHUNK_BYTES)
            self._offsets[path] = handle.tell()
        if header:
            print(header, flush=True)
        if data:
            text = self._redactor.redact(data.decode("utf-8", errors="replace"))
            print(text, end="" if text.endswith("\n") else "\n", flush=True)
