"""`reqdrive status [RUN]`: the runs in the work dir, and with REDIS_URL the queue's jobs."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from bot.ops.embedded_redis import EmbeddedRedis
from bot.ops.queue_status import DEFAULT_FINISHED, queue_json, queue_status, render_queue
from bot.ops.settings import REDIS_SCHEMES, installations_from, limits_of
from bot.stores.spend import TOTAL, SpendStore
from worker.exceptions import PreflightError, ReqdriveError
from worker.local.exit_codes import ExitCode, exit_code_for
from worker.local.repo_cli import work_dir_for
from worker.local.runs import list_runs, read_run, render_runs, run_folder


def status_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="reqdrive status",
        description="The runs in the work dir (state, stories, attempts, cost, whether a "
        "process still holds the run) and, when REDIS_URL is set or `reqdrive up` runs with "
        "this work dir, the queue: queued, running (worker, story, for how long), failed and "
        "the last finished jobs, per repository.",
    )
    parser.add_argument("run_id", nargs="?", metavar="RUN", help="one run, with its stories")
    parser.add_argument("--work-dir", type=Path, help="default $REQDRIVE_WORK_DIR or .reqdrive")
    parser.add_argument("--queue", default=None, help="default $REQDRIVE_QUEUE or reqdrive")
    parser.add_argument(
        "--finished", type=int, default=DEFAULT_FINISHED, help="finished jobs shown per queue"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    output: dict[str, Any] = {}
    lines: list[str] = []
    try:
        work_dir = _local(args, env, output, lines)
        if env.get("REDIS_URL"):
            _queue(args, env, env["REDIS_URL"], "the Redis at REDIS_URL", output, lines)
        elif work_dir is not None and (url := _up_redis(work_dir)):
            _queue(args, env, url, f"the Redis of `reqdrive up` in {work_dir}", output, lines)
    except ReqdriveError as error:
        print(f"reqdrive status: {error}", file=sys.stderr)
        return int(exit_code_for(error))
    if args.json:
        print(json.dumps(output, indent=2))
    else:
        print("\n".join(lines))
    return int(ExitCode.SUCCESS)


def _up_redis(work_dir: Path) -> str | None:
    """The embedded Redis of a `reqdrive up` running with this work dir, if its socket is there."""
    embedded = EmbeddedRedis(work_dir.resolve() / "redis")
    return embedded.url if embedded.socket_path.exists() else None


def _local(
    args: argparse.Namespace, env: dict[str, str], out: dict[str, Any], lines: list[str]
) -> Path | None:
    try:
        runs_dir = work_dir_for(args.work_dir, env) / "runs"
    except PreflightError:
        if args.run_id or not env.get("REDIS_URL"):
            raise PreflightError(
                "not inside a git repository: run it in a checkout, or pass --work-dir "
                "(or set REDIS_URL to see the queue)"
            ) from None
        return None  # the queue alone, from anywhere
    runs = [read_run(run_folder(runs_dir, args.run_id))] if args.run_id else list_runs(runs_dir)
    out["work_dir"] = str(runs_dir.parent)
    out["runs"] = [r.to_json() for r in runs]
    lines.append(f"runs in {runs_dir.parent}:")
    lines += [f"  {line}" for line in render_runs(runs, detail=bool(args.run_id))]
    return runs_dir.parent


def _queue(
    args: argparse.Namespace,
    env: dict[str, str],
    url: str,
    named: str,
    out: dict[str, Any],
    lines: list[str],
) -> None:
    name = args.queue or env.get("REQDRIVE_QUEUE") or "reqdrive"
    if not url.startswith(REDIS_SCHEMES):  # redis-py's ValueError is a traceback
        raise PreflightError(
            "REDIS_URL must start with redis://, rediss:// or unix:// (for example "
            "redis://127.0.0.1:6379/0); unset it to see only the runs in the work dir"
        )
    conn = redis.Redis.from_url(url, socket_timeout=5)
    try:
        by_repo = queue_status(conn, name, finished=args.finished)
    except redis.RedisError:
        # Named, not printed: the URL may carry a password.
        raise PreflightError(f"{named} does not answer") from None
    out["queue"] = {"name": name, "repositories": queue_json(by_repo)}
    lines.append(f"queue {name}:")
    lines += [f"  {line}" for line in render_queue(by_repo)]
    month, spend = SpendStore(conn).this_month()
    default = _usd(env.get("REQDRIVE_MONTHLY_BUDGET_USD"))
    own = installations_from(env.get("REQDRIVE_INSTALLATIONS"))
    limits = {i: limits_of(i, own, default, 1).monthly_budget_usd for i in spend}
    out["spend"] = {
        "month": month,
        "monthly_budget_usd": default,
        "installations": spend,
        "monthly_budget_usd_by_installation": limits,
    }
    lines += render_spend(month, spend, limits)


def render_spend(
    month: str, spend: dict[int, dict[str, float]], limits: dict[int, float | None]
) -> list[str]:
    """What the agents cost per installation this month (against its monthlyBudgetUsd), and
    per run."""
    lines = [f"agent spend in {month} (UTC):"]
    if not spend:
        lines.append("  none")
    for installation, runs in spend.items():
        limit = limits.get(installation)
        cap = f" of its ${limit:.2f} monthlyBudgetUsd" if limit else ""
        lines.append(f"  installation {installation}: ${runs.get(TOTAL, 0.0):.2f}{cap}")
        shares = sorted((usd, run) for run, usd in runs.items() if run != TOTAL)
        lines += [f"    {run}: ${usd:.2f}" for usd, run in reversed(shares)]
    return lines


def _usd(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:  # the worker refuses to start with it; status shows no cap
        return None
