"""A gate run's per-test results, from the reporter the worker added, cross-checked."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from worker.confine.limits import ResourceLimits
from worker.confine.redact import Redactor, redact_file
from worker.confine.safe_paths import copy_out
from worker.model.gates import GateSpec, Runner
from worker.verdict.collected import Collected
from worker.verdict.crosscheck import exit_disagreements, pytest_disagreements
from worker.verdict.go_results import read_go_events
from worker.verdict.js_results import read_js_report
from worker.verdict.junit_report import (
    FAILURE_CHARS,
    FAILURE_TEXT_CHARS,
    FAILURES_KEPT,
    read_junit,
)
from worker.verdict.junit_stream import report_too_large
from worker.verdict.pytest_results import read_plugin_results
from worker.verdict.runners import JSON_FILE, JUNIT_FILE, PLUGIN_FILE
from worker.verdict.summary_lines import summary_disagreements

# The gate's name for the repository's test command: it runs tests whatever its runner.
TESTS_GATE = "tests"


@dataclass(frozen=True)
class Places:
    """Where one gate run's reports are: the worktree, the worker's results folder the gate
    wrote into, the gate's log, and the run folder the reports are kept in (as `stem`.*)."""

    cwd: Path
    folder: Path
    log: Path
    output_dir: Path
    stem: str


def runs_tests(spec: GateSpec, runner: Runner | None) -> bool:
    """Whether the gate is expected to give per-test results: it names or starts a test
    runner or a report, or it is the repository's test command."""
    return runner is not None or spec.junit is not False or spec.name == TESTS_GATE


def collect(
    spec: GateSpec,
    runner: Runner | None,
    places: Places,
    exit_code: int | None,
    redactor: Redactor,
    limits: ResourceLimits,
    only: Collection[str] | None = None,
) -> Collected:
    """What the gate's tests did, read only from copies of the reports (never through a link
    the gate made), redacted before they are read, and where the reports disagree."""
    if runner is Runner.GO and spec.junit is False:
        found = read_go_events(places.log, limits)
        found.selecting = found.tests is not None
    elif runner in (Runner.JEST, Runner.VITEST) and spec.junit is False:
        found = read_js_report(_copy(places, JSON_FILE, "json", redactor), places.cwd, limits)
        if only is not None and found.tests is not None:
            # The tests the name pattern left out are reported as not run: not ours.
            # An id without a name asks for a whole file.
            found.tests = {
                t: s for t, s in found.tests.items() if t in only or t.partition("::")[0] in only
            }
            found.selecting = True
    elif runner in (Runner.PYTEST, None):
        found = _pytest(spec, runner, places, exit_code, redactor, limits)
    else:  # node's JUnit, a report the gate names (`junit:`), cargo's only that way
        found = _junit(spec, places, redactor, limits)
    if found.tests is not None:
        found.disagreements += exit_disagreements(found, exit_code)
        found.disagreements += summary_disagreements(found, places.log, found.runner or runner)
        found.failures = _cut_failures(found.failures, redactor)
    return found


def _pytest(
    spec: GateSpec,
    runner: Runner | None,
    places: Places,
    exit_code: int | None,
    redactor: Redactor,
    limits: ResourceLimits,
) -> Collected:
    """pytest's run, as reqdrive's plugin recorded it, against pytest's JUnit report. Without
    the plugin's record, a report the gate names is read alone (another runner wrote it);
    a gate that names pytest and ran without the plugin is a disagreement."""
    junit = _junit(spec, places, redactor, limits)
    copy = _copy(places, PLUGIN_FILE, "pytest.jsonl", redactor)
    plugin = read_plugin_results(copy, limits)
    if plugin is None:
        if runner is Runner.PYTEST and junit.tests is not None:
            junit.disagreements.append(
                "pytest ran without reqdrive's plugin (disabled, or PYTHONPATH replaced where "
                "reqdrive could not add to it: append to PYTHONPATH instead)"
            )
        return junit
    if plugin.problem:
        return Collected.none(plugin.problem)
    found = Collected(dict(plugin.tests), {**plugin.failures, **junit.failures}, junit.sites)
    found.collect_errors = plugin.collect_errors
    found.runner_failed = any(status == 1 for status in plugin.finished)
    found.disagreements = pytest_disagreements(plugin, junit.tests, exit_code)
    found.selecting = True
    found.sessions, found.runner = plugin.started, Runner.PYTEST
    return found


def _junit(spec: GateSpec, places: Places, redactor: Redactor, limits: ResourceLimits) -> Collected:
    """The JUnit report: the gate's own (`junit: path`, in the worktree), else the one the
    worker asked for in its results folder."""
    target = places.output_dir / f"{places.stem}.junit.xml"
    target.unlink(missing_ok=True)
    if isinstance(spec.junit, str):
        copy_out(places.cwd, spec.junit, target)
    else:
        copy_out(places.folder, JUNIT_FILE, target)
    too_large = report_too_large(target, limits)
    if too_large is not None:  # neither redacted nor read
        target.unlink(missing_ok=True)
        return Collected.none(too_large)
    redact_file(target, redactor)  # it holds test ids and failure output
    report = read_junit(target, places.cwd, redactor, limits)
    if report.tests is None:
        return Collected.none(report.problem or "no report")
    return Collected(report.tests, report.failures, report.sites)


def _copy(places: Places, name: str, suffix: str, redactor: Redactor) -> Path:
    """A report of the results folder copied into the run folder and redacted there."""
    target = places.output_dir / f"{places.stem}.{suffix}"
    target.unlink(missing_ok=True)
    if copy_out(places.folder, name, target):
        redact_file(target, redactor)
    return target


def _cut_failures(failures: dict[str, str], redactor: Redactor) -> dict[str, str]:
    """The first failures' output, redacted whole then cut (a cut could leave half a secret)."""
    kept = list(failures.items())[:FAILURES_KEPT]
    return {t: redactor.redact(text[-FAILURE_TEXT_CHARS:])[-FAILURE_CHARS:] for t, text in kept}
