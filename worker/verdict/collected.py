"""What the worker's collectors found in one gate run, in one shape for every runner."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from worker.model.gates import FailureSite, Runner, TestStatus


@dataclass
class Collected:
    """Per-test results of one gate run: each test id's status (None: no per-test results,
    and `problem` says why), failed tests' output and sites, and what the collector itself
    found inconsistent (`disagreements`)."""

    tests: dict[str, TestStatus] | None
    failures: dict[str, str]
    sites: dict[str, FailureSite] = field(default_factory=dict)
    problem: str | None = None
    disagreements: list[str] = field(default_factory=list)
    collect_errors: list[str] = field(default_factory=list)  # files that failed to load
    # The runner's own word on the run as a whole, when it gives one: True when it says the
    # tests failed (pytest's exit status 1, jest's `success: false`).
    runner_failed: bool | None = None
    # Each status as often as the runner listed it, before ids that repeat were merged.
    listed: Counter[TestStatus] = field(default_factory=Counter)
    runner: Runner | None = None  # the runner that wrote them, when the gate did not name it
    sessions: int = 1  # runs of the runner the results cover (pytest: its sessions)
    selecting: bool = False  # from a runner that ran only the ids asked for (`only`)

    @classmethod
    def none(cls, problem: str) -> Collected:
        return cls(None, {}, problem=problem)
