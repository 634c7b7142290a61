"""The `reqdrive` command: up, serve, worker, replay and run."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from bot.exceptions import ConfigurationError
from bot.ops.logs import configure_from, service_secrets
from bot.ops.settings import Settings, load_settings
from bot.ops.startup import (
    app_credentials_problem,
    ensure_port_free,
    ensure_redis_answers,
    port_number,
    root_warning,
)

# The production web server, run as `python -m <first item>` by `reqdrive serve` (the Procfile's
# web process) and by `reqdrive up`; switching servers is a change to this one table. granian's
# Rust HTTP front end answered the intake bench 3-4x faster than any gunicorn worker model
# (bench/README.md); one worker process per core, WEB_CONCURRENCY to override.
# The server's own log lines go through bot/ops/logs.py's formatter too (server_logging.json).
WEB_SERVER = (
    "granian",
    *("--interface", "asgi"),
    *("--workers", "{workers}"),
    *("--host", "{host}"),
    *("--port", "{port}"),
    "--no-access-log",
    *("--log-config", "{log_config}"),
    # Slow clients: headers within 10 s (GitHub's own delivery timeout); bodies are read by
    # bot/web/asgi.py within a deadline and a memory budget, holding no thread while they arrive.
    *("--http1-header-read-timeout", "10000"),
    *("--factory", "bot.web.asgi:create_asgi_app"),
)
SERVER_LOG_CONFIG = Path(__file__).parent / "ops" / "server_logging.json"

# Commands on a local checkout, parsed by the engine's own modules (imported only when used).
ENGINE_COMMANDS = {
    "init": ("worker.local.repo_cli", "init_main"),
    "validate": ("worker.local.repo_cli", "validate_main"),
    "plan": ("worker.local.run_cli", "plan_main"),
    "logs": ("worker.local.repo_cli", "logs_main"),
    "status": ("bot.ops.status_cli", "status_main"),
    "runs": ("worker.local.runs_cli", "runs_main"),
    "discard": ("worker.local.runs_cli", "discard_main"),
    "doctor": ("bot.ops.doctor", "doctor_main"),
}
ENGINE_HELP = {
    "init": "write .github/reqdrive.yml and a template requirement in this checkout",
    "validate": "check the repository's config and every REQ-*.md",
    "plan": "plan a requirement into stories only, as run would",
    "status": "runs in the work dir, and the queue's jobs when REDIS_URL is set",
    "logs": "a run's progress and its current agent call's log",
    "runs": "the runs in the work dir, one line each: id, state, requirement, branch, when",
    "discard": "remove a run that is over: its branch, worktree and run folder",
    "doctor": "check git, bubblewrap, the agent CLI, Redis, the App's identity and toolchains",
}

MMAP_THRESHOLD_BYTES = 1024 * 1024
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 3000
# How long `up` lets a running job finish after Ctrl-C. A job stopped sooner is retried later
# from its checkpoint (RQ Retry), so waiting longer only keeps the developer waiting.
DEFAULT_GRACE_S = 20.0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run one subcommand; return the process exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list:
        # `reqdrive` alone is someone finding their way: the commands, not a usage error.
        build_parser().print_help()
        return 0
    if args_list[:1] == ["run"]:
        # Every option after `run` belongs to the engine's own parser, --help included.
        return run_engine(args_list[1:])
    if args_list[:1] and args_list[0] in ENGINE_COMMANDS:
        module, function = ENGINE_COMMANDS[args_list[0]]
        return int(getattr(importlib.import_module(module), function)(args_list[1:]))
    args = build_parser().parse_args(args_list)
    try:
        code: int = args.handler(args)
    except ConfigurationError as exc:
        print(f"reqdrive: {exc}", file=sys.stderr)
        return 2
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reqdrive",
        description="A self-hosted GitHub App that turns requirements into pull requests.",
    )
    parser.add_argument("--version", action="version", version=f"reqdrive {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = _command(
        commands,
        "up",
        "run the local stack: Redis if needed, web, one worker",
        "Start the whole stack in this folder: an embedded Redis under .reqdrive/ unless "
        "REDIS_URL is set, the web server and one worker, read from the environment and .env; "
        "prints where to point GitHub's webhooks. Ctrl-C stops everything together.",
    )
    _add_bind_options(up)
    up.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE_S,
        metavar="SECONDS",
        help=f"time a running job gets to finish after Ctrl-C (default {DEFAULT_GRACE_S:g}s; "
        "a second Ctrl-C: none)",
    )
    up.set_defaults(handler=_up)

    serve = _command(
        commands,
        "serve",
        "run the production web server (Procfile web)",
        "Serve POST /webhook, GET /healthz and GET /metrics with granian (one process per core, "
        "WEB_CONCURRENCY to change). Needs GITHUB_WEBHOOK_SECRET and a Redis (REDIS_URL).",
    )
    _add_bind_options(serve)
    serve.set_defaults(handler=_serve)

    worker = _command(
        commands,
        "worker",
        "run one RQ worker with scheduler on the queue",
        "Take reqdrive's jobs from the queue in REDIS_URL and run them: plan, implement and "
        "verify requirements, report to GitHub. Needs the App's identity (GITHUB_APP_ID and "
        "its private key) and bubblewrap unless REQDRIVE_SANDBOX=off.",
    )
    worker.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    worker.set_defaults(handler=_worker)

    replay = _command(
        commands,
        "replay",
        "sign a stored payload and post it to a server",
        "Sign a stored webhook payload with GITHUB_WEBHOOK_SECRET exactly as GitHub does and "
        "post it to a running reqdrive (by default the one `reqdrive up` started here).",
    )
    replay.add_argument("event", help="the X-GitHub-Event name, e.g. issues or ping")
    replay.add_argument("payload", help="a JSON file; its exact bytes are signed and sent")
    replay.add_argument(
        "--url",
        help="where to post (default: the webhook URL of the `reqdrive up` running here, "
        f"else http://{DEFAULT_HOST}:{DEFAULT_PORT}/webhook)",
    )
    replay.add_argument("--delivery-id", help="X-GitHub-Delivery (default: a random UUID)")
    replay.set_defaults(handler=_replay)

    # Listed for --help only: main() hands these to the engine before argparse sees them.
    commands.add_parser("run", help="run a requirement locally, without GitHub", add_help=False)
    for name, text in ENGINE_HELP.items():
        commands.add_parser(name, help=text, add_help=False)
    return parser


def _command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    summary: str,
    description: str,
) -> argparse.ArgumentParser:
    """A subcommand with its one-line summary (in `reqdrive --help`) and its own description."""
    return commands.add_parser(name, help=summary, description=description)


def _add_bind_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"default {DEFAULT_HOST}")
    parser.add_argument(
        "--port", type=port_number, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}"
    )


def _version() -> str:
    try:
        return version("reqdrive")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def web_server_argv(host: str, port: int) -> list[str]:
    """The web server's command line, run by this interpreter so the venv is always used."""
    module, *args = WEB_SERVER
    workers = web_concurrency()
    values = {"host": host, "port": port, "workers": workers, "log_config": SERVER_LOG_CONFIG}
    argv = (a.format(**values) for a in args)
    return [sys.executable, "-m", module, *argv]


def web_concurrency() -> int:
    """Web worker processes: WEB_CONCURRENCY (the Heroku/Procfile convention), else one per core."""
    configured = os.environ.get("WEB_CONCURRENCY", "")
    return int(configured) if configured.isdigit() and int(configured) > 0 else os.cpu_count() or 1


def _up(args: argparse.Namespace) -> int:
    from bot.ops.stack import run_stack  # the stack pulls in process handling only `up` needs

    return run_stack(host=args.host, port=args.port, grace_s=args.grace)


def _serve(args: argparse.Namespace) -> int:
    # Checked here so a missing secret or a taken port is one clear line, not the server's
    # traceback.
    load_settings()
    ensure_port_free(args.host, args.port)
    argv = web_server_argv(args.host, args.port)
    # glibc raises its mmap threshold to the size of the largest block freed (up to 32 MiB),
    # after which 25 MiB delivery bodies come from the heap and are never given back: a fixed
    # threshold keeps every body above 1 MiB in its own mapping, returned when it is freed.
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(MMAP_THRESHOLD_BYTES))
    sys.stdout.flush()
    sys.stderr.flush()
    # exec: the server becomes this process, so signals from a supervisor reach it directly.
    os.execv(argv[0], argv)  # noqa: S606 - an argument list, no shell involved


def _worker(args: argparse.Namespace) -> int:
    import redis

    from bot.jobs.recovery import Sweeper
    from bot.jobs.runtime import configure
    from bot.jobs.worker_class import ReqdriveWorker
    from bot.web.app import DEFAULT_REDIS_URL  # the worker reads the Redis the web process writes

    settings = load_settings()
    configure_from(settings)
    startup_log = logging.getLogger("bot.worker")
    if (as_root := root_warning()) is not None:
        startup_log.warning(as_root)
    problem = app_credentials_problem(settings)
    if problem is not None:
        if problem[0]:
            raise ConfigurationError(problem[1])
        startup_log.warning(problem[1])
    _check_sandbox(settings)
    url = settings.redis_url or DEFAULT_REDIS_URL
    ensure_redis_answers(url, configured=settings.redis_url is not None, command="worker")
    # No socket timeout, unlike the web's client: the worker blocks on the queue on purpose.
    connection = redis.Redis.from_url(url)
    if problem is None:
        # Built once here; forked work horses inherit it.
        runtime = configure(settings, connection)
        # Runs whose worker died are resumed by whichever worker notices first.
        Sweeper(runtime, every_s=settings.reqdrive_recovery_sweep_s).start()
    # JSON jobs (plain arguments), and only reqdrive's own functions: bot/jobs/worker_class.py.
    worker = ReqdriveWorker(
        [settings.reqdrive_queue],
        connection=connection,
        secrets=service_secrets(settings),
        max_concurrent_runs=settings.reqdrive_max_concurrent_runs,
        installation_runs={
            installation: own.max_concurrent_runs
            for installation, own in settings.reqdrive_installations.items()
            if own.max_concurrent_runs is not None
        },
    )
    # RQ adds no handler of its own when the root logger has ours (configure_logging).
    worker.work(burst=args.burst, with_scheduler=True, logging_level=settings.reqdrive_log_level)
    return 0


def _check_sandbox(settings: Settings) -> None:
    """Refuse to take jobs when agents could not be confined, unless the operator said off."""
    from worker.confine.limits import process_mechanism
    from worker.confine.sandbox import api_hosts, make_sandbox, readonly_paths
    from worker.exceptions import SandboxUnavailable

    readonly = readonly_paths(settings.reqdrive_sandbox_readonly)
    hosts = api_hosts(settings.reqdrive_sandbox_api_hosts)
    network = settings.reqdrive_sandbox_network
    limits = settings.limits()
    try:
        # off: logged as a warning there; the `api` network is checked too (--unshare-net)
        make_sandbox(
            settings.reqdrive_sandbox, readonly, network=network, api_hosts=hosts, limits=limits
        )
    except SandboxUnavailable as error:
        raise ConfigurationError(f"reqdrive worker: {error}") from None
    process_mechanism()  # logs, once, how this host bounds each call (cgroup or rlimits)


def _replay(args: argparse.Namespace) -> int:
    from bot.ops.replay import replay_file, running_stack_url
    from bot.ops.startup import LOCK_FILE

    # The same .env `reqdrive up` reads; variables set in the environment win over it.
    settings = load_settings(_env_file=Path.cwd() / ".env")
    secret = settings.github_webhook_secret.get_secret_value()
    url = (
        args.url
        or running_stack_url(settings.reqdrive_work_dir / LOCK_FILE)
        or f"http://{DEFAULT_HOST}:{DEFAULT_PORT}/webhook"
    )
    return replay_file(
        args.event, args.payload, url=url, delivery_id=args.delivery_id, secret=secret
    )


def run_engine(argv: list[str]) -> int:
    """Hand `reqdrive run ...` to the engine's own command line in worker/local/run_cli.py."""
    # Imported only for `run`: the web and worker processes need none of the engine's CLI.
    engine = importlib.import_module("worker.local.run_cli")
    return int(engine.main(argv))


if __name__ == "__main__":
    sys.exit(main())
