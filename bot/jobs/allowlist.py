"""The functions a reqdrive worker runs: bot.jobs' entry points, and nothing a job names else."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rq.exceptions import DeserializationError, NoSuchJobError
from rq.job import Job

import bot.jobs

JOBS_MODULE = "bot.jobs"
# Before the jobs moved to bot/ (the engine must not import the GitHub side), intake queued
# them as worker.jobs.<name>; jobs still waiting under those names run the same function.
LEGACY_MODULE = "worker.jobs"
ENTRY_POINTS = frozenset(f"{JOBS_MODULE}.{name}" for name in bot.jobs.__all__)
# A refused job's name is attacker text: the log and the failure show a bounded repr of it.
NAME_SHOWN_CHARS = 200


class JobRefused(Exception):
    """A job named a function, callback or dependency that is not one of reqdrive's jobs."""


def current_name(func_name: str) -> str:
    """The function a stored job name means today."""
    legacy = f"{LEGACY_MODULE}."
    if func_name.startswith(legacy):
        return f"{JOBS_MODULE}.{func_name.removeprefix(legacy)}"
    return func_name


def entry_point(name: object) -> Callable[..., Any] | None:
    """The bot.jobs function `name` means, or None: nothing outside the allowlist is imported."""
    if not isinstance(name, str) or current_name(name) not in ENTRY_POINTS:
        return None
    function: Callable[..., Any] = getattr(bot.jobs, current_name(name).rpartition(".")[2])
    return function


def shown(name: object) -> str:
    """A stored name as a log or a failure shows it: quoted, escaped, bounded."""
    text = repr(name)
    return text if len(text) <= NAME_SHOWN_CHARS else f"{text[:NAME_SHOWN_CHARS]}..."


def stored_name(job: Job) -> str:
    """The function a stored job names, as shown() shows it, even when it cannot be read."""
    try:
        return shown(job.func_name)
    except DeserializationError:
        return "<unreadable>"


def refusal(job: Job) -> str | None:
    """Why `job` must not run, or None when everything it names is one of reqdrive's jobs.

    Reads names only (JSON, the worker's serializer), never imports or calls what they name.
    reqdrive queues no callbacks, dependencies, instances or webhooks: a job that names anything
    but an entry point, or asks for webhooks, is someone else's.
    """
    try:
        return _refusal(job)
    except Exception:  # a hand-made job hash (a dependency id rq cannot parse) stops no worker
        return "it could not be read"


def _refusal(job: Job) -> str | None:
    try:
        func_name, instance = job.func_name, job.instance
    except DeserializationError:  # a pickle, or anything but the JSON reqdrive writes
        return "its data is not the JSON reqdrive writes"
    if entry_point(func_name) is None:
        return f"its function {shown(func_name)} is not one of reqdrive's jobs"
    if instance is not None:
        return "it names an instance to call a method on"
    if job.webhooks:
        return "it asks for webhooks"
    for kind, callback in callback_names(job).items():
        if callback and entry_point(callback) is None:
            return f"its {kind} callback {shown(callback)} is not one of reqdrive's jobs"
    return _dependency_refusal(job)


def callback_names(job: Job) -> dict[str, str | None]:
    """The callbacks a stored job names. rq keeps the names only on protected attributes and
    imports them on first read of `success_callback` & co.; the contract is tested in
    tests/integration/test_jobs_allowlist.py."""
    return {
        "on_success": job._success_callback_name,
        "on_failure": job._failure_callback_name,
        "on_stopped": job._stopped_callback_name,
    }


def _dependency_refusal(job: Job) -> str | None:
    for dependency_id in job._dependency_ids:  # rq has no public list of them
        try:
            dependency = type(job).fetch(
                dependency_id, connection=job.connection, serializer=job.serializer
            )
            name = dependency.func_name
        except NoSuchJobError:
            continue  # gone: it names nothing any more
        except DeserializationError:
            return f"its dependency {shown(dependency_id)} is not readable"
        if entry_point(name) is None:
            return f"its dependency {shown(dependency_id)} runs {shown(name)}"
    return None
