"""Findings read from real linter outputs, and what a story adds to a base's findings."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.confine.processes import TAIL_CHARS
from worker.model.gates import GateResult
from worker.model.state import StopReason, StoryRecord, StoryState
from worker.verdict.base_debt import base_debt, failing_gate
from worker.verdict.findings import findings, listed, new_findings
from worker.verdict.judging import Verdict, judge
from worker.verdict.readiness import readiness

LINT = Path(__file__).resolve().parents[1] / "fixtures" / "lint"
UNUSED = ["a.py: F401 [*] `os` imported but unused"]


def lint(output: str, *, passed: bool = False) -> GateResult:
    return GateResult(
        name="lint",
        command="lint",
        passed=passed,
        exit_code=0 if passed else 1,
        timed_out=False,
        duration_s=0.1,
        output_tail=output,
    )


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        (
            "ruff-concise.txt",
            [
                "a.py: F401 [*] `os` imported but unused",
                "a.py: F841 Local variable `x` is assigned to but never used",
            ],
        ),
        # ruff's default format puts the message above ` --> a.py:1:8`, and shows code and
        # help lines that are no findings.
        (
            "ruff-full.txt",
            [
                "a.py: F401 [*] `os` imported but unused",
                "a.py: F841 Local variable `x` is assigned to but never used",
            ],
        ),
        (
            "mypy.txt",
            [
                'b.py: error: Incompatible return value type (got "int", expected "str") '
                "[return-value]",
                'b.py: error: Incompatible types in assignment (expression has type "str", '
                'variable has type "int") [assignment]',
            ],
        ),
        (
            "eslint-unix.txt",
            [
                "/home/dev/app/src/index.js: 'parse' is defined but never used. "
                "[Error/no-unused-vars]",
                "/home/dev/app/src/index.js: Unexpected console statement. [Warning/no-console]",
                "/home/dev/app/lib/util.js: Missing semicolon. [Error/semi]",
            ],
        ),
        # ESLint's default format: aligned columns, the blanks of which are not the finding.
        (
            "eslint-stylish.txt",
            [
                "/home/dev/app/src/index.js: error 'parse' is defined but never used "
                "no-unused-vars",
                "/home/dev/app/src/index.js: warning Unexpected console statement no-console",
                "/home/dev/app/lib/util.js: error Missing semicolon semi",
            ],
        ),
    ],
)
def test_each_linters_findings_are_read_without_their_line_numbers(
    fixture: str, expected: list[str]
) -> None:
    found = findings((LINT / fixture).read_text())
    assert found is not None and list(found) == expected


def test_an_output_that_names_no_finding_has_none_to_compare() -> None:
    assert findings("Traceback (most recent call last):\nSyntaxError: bad\n") is None
    # A tail cut to its last 64 KiB may have lost the findings the base already had.
    assert findings("x.py:1:1: E1 bad\n" * (TAIL_CHARS // 15)) is None


def test_a_moved_finding_is_not_new_and_an_added_one_is_named() -> None:
    base = lint("a.py:1:8: F401 `os` imported but unused\nb.py:3: F811 redefinition from line 2\n")
    moved = lint("a.py:9:8: F401 `os` imported but unused\nb.py:7: F811 redefinition from line 6\n")
    assert new_findings(base, moved) == []
    added = lint(moved.output_tail + "./c.py:2:1: E501 Line too long\n")
    assert new_findings(base, added) == ["c.py: E501 Line too long"]
    # The same finding once more in the same file is new too.
    twice = lint(added.output_tail + "a.py:30:8: F401 `os` imported but unused\n")
    assert new_findings(base, twice) == [
        "a.py: F401 `os` imported but unused",
        "c.py: E501 Line too long",
    ]
    # Against a green base every finding is new; a green branch adds none.
    assert new_findings(lint("All checks passed!", passed=True), base) == [
        "a.py: F401 `os` imported but unused",
        "b.py: F811 redefinition from line N",
    ]
    assert new_findings(base, lint("", passed=True)) == []
    assert new_findings(base, lint("crashed")) is None


def test_new_findings_are_named_up_to_a_cap() -> None:
    assert listed(UNUSED) == "1 new finding: a.py: F401 [*] `os` imported but unused"
    many = [f"x.py: E{n}" for n in range(7)]
    assert (
        listed(many)
        == "7 new findings: x.py: E0; x.py: E1; x.py: E2; x.py: E3; x.py: E4; and 2 more"
    )


def test_a_gate_red_on_the_base_and_no_worse_on_the_branch_is_the_bases_debt() -> None:
    base = lint((LINT / "ruff-concise.txt").read_text())
    same = lint((LINT / "ruff-full.txt").read_text())
    assert base_debt([base], [same]) == {
        "lint": "2 findings on the base commit; this branch adds none"
    }
    worse = lint(base.output_tail + "new.py:1:1: E999 bad\n")
    assert base_debt([base], [worse]) == {}
    assert failing_gate(worse, [base]) == "lint (1 new finding: new.py: E999 bad)"
    # No findings to compare: today's rule (a draft), said to fail on the base too.
    crash = lint("Segmentation fault")
    assert base_debt([crash], [crash]) == {}
    assert failing_gate(crash, [crash]) == "lint (fails on the base too)"
    assert failing_gate(crash, [lint("", passed=True)]) == "lint"


def test_without_per_test_results_a_story_is_judged_on_the_findings_it_adds() -> None:
    base = lint((LINT / "ruff-concise.txt").read_text())
    moved = lint(base.output_tail.replace("a.py:1:8:", "a.py:3:8:"))
    assert judge([base], [moved], ["lint"]) == (Verdict.PASSED, "added no failing test")
    worse = lint(base.output_tail + "new.py:1:1: E999 bad\n")
    assert judge([base], [worse], ["lint"]) == (
        Verdict.FAILED,
        "gate lint failed: 1 new finding: new.py: E999 bad",
    )
    crash = lint("Segmentation fault")
    assert judge([crash], [crash], ["lint"])[0] is Verdict.UNVERIFIED


def test_the_bases_lint_debt_alone_does_not_make_the_pr_a_draft() -> None:
    base = lint((LINT / "ruff-concise.txt").read_text())
    worse = lint(base.output_tail + "new.py:1:1: E999 bad\n")
    stories = [
        StoryRecord(
            id="US-1", title="x", priority=1, acceptance_criteria=["x"], state=StoryState.PASSED
        )
    ]
    done = StopReason.ALL_STORIES_PASSED
    ready = readiness(stories, [base], expected_gates=["lint"], stop=done, baseline=[base])
    assert ready == (True, None)
    assert readiness(stories, [worse], expected_gates=["lint"], stop=done, baseline=[base]) == (
        False,
        "the final checks fail on the branch: lint (1 new finding: new.py: E999 bad)",
    )
