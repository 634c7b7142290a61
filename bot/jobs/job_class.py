"""The worker's RQ Job class: it resolves only reqdrive's own job functions, by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rq.job import Job, JobStatus

from bot.jobs.allowlist import JobRefused, current_name, entry_point, shown


class ReqdriveJob(Job):
    """rq's Job whose function and callbacks come from bot.jobs' entry points only.

    rq imports whatever dotted name a stored job carries (`rq.utils.import_attribute`) when it
    reads `func` or a callback; this class looks the name up in the allowlist instead, so no
    path through rq (the work horse, a retry, the scheduler, a registry's cleanup of abandoned
    jobs) imports or calls anything else. The legacy worker.jobs.* names read as bot.jobs.*.
    """

    # rq's own property, called through the class (mypy types a property read off its class
    # as its value, hence the ignores); super() cannot reach a property's setter.
    @property
    def func_name(self) -> str | None:
        name: str | None = Job.func_name.fget(self)  # type: ignore[attr-defined]
        return current_name(name) if isinstance(name, str) else name

    @func_name.setter
    def func_name(self, value: Any) -> None:
        Job.func_name.fset(self, value)  # type: ignore[attr-defined]

    @property
    def func(self) -> Callable[..., Any]:
        function = entry_point(self.func_name) if self.instance is None else None
        if function is None:
            raise JobRefused(f"job {self.id} names {shown(self.func_name)}, not one of reqdrive's")
        return function

    # A callback outside the allowlist is never imported: the job runs (or fails) without it.
    @property
    def success_callback(self) -> Callable[..., Any] | None:
        return entry_point(self._success_callback_name)

    @property
    def failure_callback(self) -> Callable[..., Any] | None:
        return entry_point(self._failure_callback_name)

    @property
    def stopped_callback(self) -> Callable[..., Any] | None:
        return entry_point(self._stopped_callback_name)

    def send_webhooks(self, status: str | JobStatus, *, exc_string: str | None = None) -> None:
        """Sends nothing: reqdrive registers no webhooks, so one stored on a job was put there
        by someone else, to make the worker send requests where they chose."""
        del status, exc_string
