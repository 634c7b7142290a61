"""`reqdrive init` and `reqdrive validate`: set a checkout up for reqdrive and check it."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from worker.cli import ExitCode, exit_code_for, repo_root
from worker.exceptions import ReqdriveError
from worker.init_repo import init_repository
from worker.validate_repo import SEEDS_CONFIG, convert_seeds_config, validate_repository


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
        written, found = init_repository(root, force=args.force)
    except ReqdriveError as error:
        print(f"reqdrive init: {error}", file=sys.stderr)
        return int(exit_code_for(error))
    names = [p.relative_to(root).as_posix() for p in written]
    print(f"reqdrive init: a {found.stack} project")
    for name in names:
        print(f"  wrote {name}")
    for note in found.notes:
        print(f"  note: {note}")
    print("Next: review the files, then")
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
