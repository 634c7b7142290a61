"""CI's failed jobs as a CI-fix story reads them: redacted, the failing part, test ids, capped."""

from __future__ import annotations

from bot.github.ci_runs import FailedCheck
from bot.jobs.ci_fix import ci_story
from bot.jobs.ci_logs import CHECK_CHARS, REPORT_CHARS, failing_part, read_failure
from worker.confine.redact import Redactor

TOKEN = "ghs_0123456789abcdefghijklmnopqrstuvwxyzAB"
PYTEST_LOG = "\n".join(
    [
        "2024-05-01T10:00:00.1000000Z ##[group]Run pytest -q",
        *[f"2024-05-01T10:00:01.0000000Z collecting line {n}" for n in range(200)],
        "2024-05-01T10:00:02.0000000Z tests/test_cart.py F.                  [100%]",
        "2024-05-01T10:00:02.0000000Z     def test_total():",
        "2024-05-01T10:00:02.0000000Z >       assert total([2, 3]) == 5",
        "2024-05-01T10:00:02.0000000Z E       assert 6 == 5",
        f"2024-05-01T10:00:02.0000000Z   token in env: {TOKEN}",
        *[f"2024-05-01T10:00:03.0000000Z teardown line {n}" for n in range(50)],
        "2024-05-01T10:00:04.0000000Z =========================== short test summary info",
        "2024-05-01T10:00:04.0000000Z FAILED tests/test_cart.py::test_total - assert 6 == 5",
        "2024-05-01T10:00:04.0000000Z ERROR tests/test_db.py::test_connect[sqlite]",
        "2024-05-01T10:00:04.0000000Z 1 failed, 1 passed, 1 error in 0.12s",
        "2024-05-01T10:00:04.0000000Z ##[error]Process completed with exit code 1.",
    ]
)


def test_the_failing_part_is_the_error_lines_with_context_and_the_logs_end() -> None:
    lines = [f"line {n}" for n in range(100)]
    lines[40] = "E   AssertionError: totals differ"
    shown = failing_part(lines)
    around = [*[f"line {n}" for n in range(37, 40)], lines[40], "line 41", "line 42", "line 43"]
    assert shown[:8] == ["…", *around]
    assert shown[-15:] == [f"line {n}" for n in range(85, 100)]
    assert "line 10" not in shown and "line 60" not in shown


def test_a_failed_jobs_log_gives_the_pytest_ids_the_failing_part_and_no_secret() -> None:
    check = FailedCheck(
        name="tests (3.12)",
        log=PYTEST_LOG,
        annotations=[f"tests/test_cart.py:2: failure: assert 6 == 5 ({TOKEN})"],
    )
    failure = read_failure([check], Redactor([TOKEN]))
    assert failure.checks == ["tests (3.12)"]
    ids = ["tests/test_cart.py::test_total", "tests/test_db.py::test_connect[sqlite]"]
    assert failure.test_ids == ids
    assert TOKEN not in failure.report
    assert "[REDACTED]" in failure.report
    assert "E       assert 6 == 5" in failure.report
    assert "##[error]Process completed with exit code 1." in failure.report
    assert "collecting line 100" not in failure.report  # far from any error: left out
    assert "2024-05-01T10" not in failure.report  # Actions' timestamps gone
    assert "- tests/test_cart.py:2: failure: assert 6 == 5" in failure.report


def test_each_check_and_the_whole_report_are_capped_and_a_log_cannot_close_the_fence() -> None:
    noisy = "\n".join(f"Error: boom {n} ```" for n in range(5000))
    checks = [FailedCheck(name=f"job {n}", log=noisy) for n in range(4)]
    failure = read_failure(checks, Redactor())
    assert len(failure.report) <= REPORT_CHARS + 100
    first = failure.report.split("### job 1")[0]
    assert len(first) <= CHECK_CHARS + 200
    assert "````" in first  # a longer fence than the log's backticks
    assert failure.report.endswith("(cut: the whole logs are on GitHub)")


def test_a_check_without_a_log_keeps_its_summary_and_annotations() -> None:
    check = FailedCheck(
        name="lint", summary="2 problems", annotations=["src/a.py:3: failure: E501 line too long"]
    )
    failure = read_failure([check], Redactor())
    assert failure.report == "### lint\n2 problems\n- src/a.py:3: failure: E501 line too long"
    assert failure.test_ids == []


def test_colours_and_control_characters_never_reach_the_ci_fix_story() -> None:
    log = (
        "\x1b[31mE       assert 1 == 2\x1b[0m\r\n"
        "\x1b]8;;https://x\x07link\x1b]8;;\x07 \u202eevil\u202c\x00\n"
        "FAILED tests/test_a.py::test_b - boom\n"
    )
    failure = read_failure([FailedCheck(name="tests \x1b[1m", log=log)], Redactor())
    assert "\x1b" not in failure.report and "[31m" not in failure.report
    story = ci_story("CI-001", failure, priority=2)  # a story's text refuses control characters
    assert "E       assert 1 == 2" in story.description
    assert "\u202e" not in story.description and "\x00" not in story.description
    assert story.ci is not None and story.ci.candidates == ["tests/test_a.py::test_b"]
    assert story.tests == []  # the worker's own checks decide which of them it owns
