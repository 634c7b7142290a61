"""Where the worker's collected results disagree with each other or with the exit code."""

from __future__ import annotations

from collections.abc import Mapping

from worker.model.gates import TestStatus
from worker.verdict.collected import Collected
from worker.verdict.pytest_results import PluginResults

SHOWN = 5  # ids named in one disagreement
# pytest's exit status when a test failed, and when it collected none.
PYTEST_TESTS_FAILED = 1
PYTEST_NO_TESTS = 5


def few(ids: set[str] | list[str]) -> str:
    listed = sorted(ids)
    more = len(listed) - SHOWN
    return ", ".join(listed[:SHOWN]) + (f" and {more} more" if more > 0 else "")


def exit_disagreements(found: Collected, exit_code: int | None) -> list[str]:
    """The command's exit code against the results: a green exit with failed tests, or a red
    one that the runner itself blames on tests while every test passed."""
    if exit_code is None or found.tests is None:
        return []
    failed = {t for t, s in found.tests.items() if s is TestStatus.FAILED}
    if exit_code == 0 and failed:
        return [f"the command exited 0, though tests failed: {few(failed)}"]
    if exit_code != 0 and not failed and found.runner_failed:
        return [
            f"the command exited {exit_code} and the runner says tests failed, though every "
            "test it reported passed"
        ]
    return []


def pytest_disagreements(
    plugin: PluginResults,
    junit: Mapping[str, TestStatus] | None,
    exit_code: int | None,
) -> list[str]:
    """reqdrive's plugin against itself, pytest's JUnit report and the exit code: on a green
    exit every test collected has a result; every result was collected; every session that
    started finished; and one session's JUnit report says what the plugin saw."""
    said = []
    if exit_code is not None and plugin.started != len(plugin.finished):
        said.append(
            f"{plugin.started} pytest session(s) started but {len(plugin.finished)} finished "
            "(a process that exits from inside a test leaves no report to trust)"
        )
    ran = set(plugin.tests) - set(plugin.collect_reports)
    # A session stopped early (-x, a collection error) leaves tests unreported, and fails.
    if exit_code == 0 and plugin.collected - ran:
        said.append(f"collected but never reported: {few(plugin.collected - ran)}")
    if ran - plugin.collected:
        said.append(f"reported but never collected: {few(ran - plugin.collected)}")
    if exit_code == 0 and any(s not in (0, PYTEST_NO_TESTS) for s in plugin.finished):
        said.append(f"the command exited 0, though pytest exited {max(plugin.finished)}")
    if plugin.raised_yet_passed:
        # The report was changed after the test ran: code in the test process forged it.
        said.append(
            "reported passed, though its test function raised: "
            + few([f"{t} ({what})" for t, what in plugin.raised_yet_passed.items()])
        )
    if junit is not None and plugin.started == 1:
        differ = {t for t in set(junit) | set(plugin.tests) if junit.get(t) != plugin.tests.get(t)}
        if differ:
            said.append(f"pytest's JUnit report and reqdrive's plugin differ on: {few(differ)}")
    return said
