"""Gates as the run keeps them: what a check runs, and what it did per test id."""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from worker.model.control_chars import CONTROL_RE

# A gate's name as it appears in its log file's name.
UNSAFE_NAME_RE = re.compile(r"[^A-Za-z0-9._-]+")
SITE_PATH_CHARS = 500
SITE_MESSAGE_CHARS = 500


class TestStatus(StrEnum):
    """What one test id did in one gate run, from its JUnit report."""

    __test__ = False  # a domain name, not a test class for pytest to collect

    PASSED = "passed"
    FAILED = "failed"  # a failure or an error (a collection error included)
    SKIPPED = "skipped"


MISSING = "missing"  # a test id the run did not report (deleted, deselected, not collected)


class Runner(StrEnum):
    """A test runner whose per-test results the worker collects itself, from outside the
    repository (docs/verification.md: what each gives)."""

    PYTEST = "pytest"
    GO = "go"
    VITEST = "vitest"
    JEST = "jest"
    NODE = "node"  # node --test
    CARGO = "cargo"  # cargo test: no stable per-test report; named so the hint can say so
    NEXTEST = "nextest"


class GateSpec(BaseModel):
    """One check the worker runs in the worktree: a bash command with a timeout."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    name: str = Field(min_length=1)
    command: str = Field(min_length=1)  # run with bash -c, in the worktree
    timeout_s: float = Field(
        default=900, gt=0, validation_alias=AliasChoices("timeout", "timeoutS", "timeout_s")
    )
    # Where per-test results come from: False (default) lets the worker ask pytest for them
    # itself; True means the command writes JUnit XML to $REQDRIVE_JUNIT_XML; a path
    # (relative to the worktree) is where the runner writes its own report.
    junit: bool | str = False
    # The test runner the command starts, when the worker cannot tell it from the command
    # (a script, `make test`): the worker then adds that runner's reporter itself.
    runner: Runner | None = None

    @field_validator("junit")
    @classmethod
    def _report_inside_worktree(cls, value: bool | str) -> bool | str:
        if isinstance(value, str):
            path = PurePosixPath(value)
            if not value.strip() or path.is_absolute() or ".." in path.parts:
                raise ValueError("must be a path inside the repository, like reports/junit.xml")
        return value


class FailureSite(BaseModel):
    """Where in the repository a failed test failed, and why in short (from its JUnit
    report, which the agent's code writes: the path is checked again wherever one is loaded)."""

    model_config = ConfigDict(frozen=True)

    path: str = Field(min_length=1, max_length=SITE_PATH_CHARS)  # relative to the repository
    line: int = Field(ge=1)
    message: str = Field(default="", max_length=SITE_MESSAGE_CHARS)  # redacted

    @field_validator("path")
    @classmethod
    def _path_inside_repository(cls, value: str) -> str:
        path = PurePosixPath(value)
        if path.is_absolute() or {"..", ".git"} & set(path.parts) or CONTROL_RE.search(value):
            raise ValueError("must be a file's path inside the repository")
        return value


class GateResult(BaseModel):
    """What one gate did, as the run keeps it (plain JSON, so it survives a checkpoint);
    `tests` is None when the gate gave no per-test results."""

    model_config = ConfigDict(frozen=True)

    name: str
    command: str
    passed: bool
    exit_code: int | None
    timed_out: bool
    duration_s: float
    output_tail: str = ""  # redacted
    tests: dict[str, TestStatus] | None = None
    failures: dict[str, str] = Field(default_factory=dict)  # failed test id -> its output
    # failed test id -> where it failed, for the tests whose file and line are known
    # (absent from checkpoints written before sites were kept).
    failure_sites: dict[str, FailureSite] = Field(default_factory=dict)
    # Where the worker's own collectors disagree with each other or with the exit code
    # (collected ids against reported ones, a green exit with failed tests): such results
    # never make an attempt "passed".
    disagreements: list[str] = Field(default_factory=list)
    # A gate that runs tests but gave no per-test results: why, and the configuration line
    # that would give them. Such a gate never makes an attempt "passed".
    no_results: str = ""
    # The test ids the run was limited to (`only`), when the runner could select them:
    # the others did not run and are absent from `tests`.
    selected: list[str] | None = None

    @property
    def failed_tests(self) -> list[str] | None:
        """The failed test ids, sorted; None without per-test results."""
        if self.tests is None:
            return None
        return sorted(t for t, status in self.tests.items() if status is TestStatus.FAILED)

    def to_json(self) -> dict[str, Any]:
        """The gate as <label>.gates.json shows it."""
        return {
            "name": self.name,
            "command": self.command,
            "passed": self.passed,
            "exitCode": self.exit_code,
            "timedOut": self.timed_out,
            "durationS": round(self.duration_s, 3),
            "outputTail": self.output_tail,
            "failedTests": self.failed_tests,
            "tests": self.tests,
            "failureSites": {t: site.model_dump() for t, site in self.failure_sites.items()},
            "disagreements": self.disagreements,
            "noResults": self.no_results,
            "selected": self.selected,
        }


def is_partial(gates: Sequence[GateResult]) -> bool:
    """Did these gates run only some of the tests (a runner selected them)?"""
    return any(g.selected is not None for g in gates)
