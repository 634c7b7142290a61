"""The worker's RQ Job class: jobs queued under the engine's old names run the bot's jobs."""

from __future__ import annotations

from typing import Any

from rq.job import Job

# Before the jobs moved to bot/ (the engine must not import the GitHub side), intake queued
# them as worker.jobs.<name>; jobs still waiting under those names run the same function here.
LEGACY_PREFIX = "worker.jobs."
CURRENT_PREFIX = "bot.jobs."


def current_name(func_name: str) -> str:
    """The function a stored job name means today."""
    if func_name.startswith(LEGACY_PREFIX):
        return CURRENT_PREFIX + func_name.removeprefix(LEGACY_PREFIX)
    return func_name


class ReqdriveJob(Job):
    """rq's Job, reading the legacy worker.jobs.* names as bot.jobs.*."""

    @property
    def func_name(self) -> str | None:
        name: str | None = Job.func_name.fget(self)  # type: ignore[attr-defined]
        return None if name is None else current_name(name)

    @func_name.setter
    def func_name(self, value: Any) -> None:
        Job.func_name.fset(self, value)  # type: ignore[attr-defined]
