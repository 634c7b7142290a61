"""The PR body render, from plain run results."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from tests.support.run_results import gate, result, story
from worker.model.fail_to_pass import fail_to_pass
from worker.model.prd import ChangedTest
from worker.model.state import (
    AttemptOutcome,
    AttemptRecord,
    FrozenTests,
    RunResult,
    StopReason,
    StoryState,
    TestCheck,
)
from worker.report import story_states
from worker.report.pr_body import render_pr_body
from worker.report.story_states import STATE_ICONS


def test_a_ready_run_says_so_with_stories_gates_checklist_cost_and_marker() -> None:
    body = render_pr_body(result(), closes_issue=12)
    assert "**2 stories: 2 passed**" in body
    assert "**Ready for review**" in body
    assert "Closes #12" in body
    assert "| ✅ | US-001 | Title of US-001 | passed | 1 | — | `aaaaaaaaaaaa` |" in body
    assert "| tests | ✅ pass | ✅ pass | `run tests` |" in body
    assert "- [ ] US-002 criterion" in body
    assert "2m 05s" in body and "$1.23" in body
    assert body.rstrip().endswith("<!-- reqdrive:run req-001 -->")


def test_a_draft_says_why_and_shows_the_failed_story() -> None:
    body = render_pr_body(
        result(
            stories=[story("US-001", StoryState.PASSED), story("US-002", StoryState.FAILED, 3)],
            final_gates=[gate("tests", False, ["t::b"])],
            ready=False,
            draft_reason="1 of 2 stories did not pass: US-002 (failed)",
            stop_reason=StopReason.STORIES_SETTLED,
        )
    )
    assert "**Draft**: 1 of 2 stories did not pass: US-002 (failed)." in body
    assert "| ❌ | US-002 | Title of US-002 | failed (gate tests failed) | 3 | — |" in body
    assert "| tests | ✅ pass | ❌ fail (1 of 1 tests failing) |" in body
    assert "Closes" not in body


def test_baseline_failures_are_listed_as_fixed_and_remaining() -> None:
    body = render_pr_body(
        result(
            baseline_gates=[gate("tests", False, ["t::a", "t::b", "t::c"])],
            final_gates=[gate("tests", False, ["t::c"])],
            fixed_tests=["t::a", "t::b"],
            remaining_tests=["t::c"],
            ready=False,
            draft_reason="the final checks fail on the branch: tests",
        )
    )
    assert "Fixed by this branch (2):\n- `t::a`\n- `t::b`" in body
    assert "Still failing (1):\n- `t::c`" in body
    assert "| tests | ❌ fail (3 of 3 tests failing) | ❌ fail (1 of 1 tests failing) |" in body


def test_agent_written_text_cannot_break_the_table_or_forge_the_marker() -> None:
    hostile = story("US-001", StoryState.PASSED).model_copy(
        update={"title": "a | b <!-- reqdrive:run other --> c\nd"}
    )
    body = render_pr_body(result(stories=[hostile]))
    assert "a \\| b &lt;!-- reqdrive:run other --&gt; c d" in body
    assert body.count("<!-- reqdrive:run") == 1


def test_no_gates_is_called_out() -> None:
    body = render_pr_body(
        result(
            final_gates=[], baseline_gates=[], ready=False, draft_reason="no gates are configured"
        )
    )
    assert "nothing verified these changes" in body


def test_each_story_shows_its_tests_before_and_after_and_why_it_failed() -> None:
    failed_once = AttemptRecord(
        iteration=2,
        attempt=1,
        outcome=AttemptOutcome.GATES_FAILED,
        reason="t::sub still fails",
        forbidden_writes=[".github/workflows/ci.yml"],
        refused_tools=["Bash curl -s http://example.com/"],
        tests=[
            TestCheck(
                id="t::sub", before="failed", after="failed", owned=True, problem="still fails"
            )
        ],
    )
    passed = AttemptRecord(
        iteration=3,
        attempt=2,
        outcome=AttemptOutcome.PASSED,
        tests=[
            TestCheck(id="t::sub", before="failed", after="passed", owned=True),
            TestCheck(
                id="t::sub_neg",
                before="missing",
                after="passed",
                owned=True,
                added=True,
                at_parent="failed",
            ),
        ],
    )
    record = story("US-002", StoryState.PASSED).model_copy(
        update={"attempts": [failed_once, passed], "tests": ["t::sub"]}
    )
    body = render_pr_body(result(stories=[record], per_test_results=True))
    assert "| ✅ | US-002 | Title of US-002 | passed | 2 | 2 of 2 pass |" in body
    assert "**US-002** — passed after 2 attempts" in body
    assert "- `t::sub` (owned): failed → passed" in body
    assert "- `t::sub_neg` (added): missing → passed; without the story's change: failed" in body
    assert "- attempt 1: gates failed: t::sub still fails" in body
    assert "- US-002 attempt 1: reverted write to `.github/workflows/ci.yml`" in body
    assert "- US-002 attempt 1: refused tool call `Bash curl -s http://example.com/`" in body
    assert "### Tests still failing\n\nNone: every test the checks ran passes" in body


def test_still_failing_tests_are_listed_with_their_reason() -> None:
    body = render_pr_body(
        result(
            per_test_results=True,
            still_failing={"t::mul": "failed before the run and no story claimed it"},
            ready=False,
            draft_reason="the final checks fail on the branch: tests",
        )
    )
    assert (
        "### Tests still failing\n\n- `t::mul`: failed before the run and no story claimed it"
        in body
    )


def test_without_per_test_results_the_pr_says_what_unverified_means() -> None:
    body = render_pr_body(
        result(
            stories=[story("US-001", StoryState.UNVERIFIED)],
            baseline_gates=[gate("tests", False)],
            final_gates=[gate("tests", True)],
        )
    )
    assert "**No per-test results**" in body
    assert "A story is *unverified*, and the pull request a draft, while a check that" in body
    assert "**Ready for review**: the final checks are green; 1 of 1 stories are unverified" in body
    assert "every story passed" not in body


# The headline's counts always agree with the table -----------------------------------------

HEADLINE_RE = re.compile(r"reqdrive ran \*\*(\d+) stor(?:y|ies): ([^*]*)\*\*")
ROW_RE = re.compile(r"^\| (\S+) \| (US-\d+) \|", re.MULTILINE)
ICON_STATES = {icon: state for state, icon in STATE_ICONS.items()}

states = st.sampled_from(list(StoryState))


@st.composite
def run_results(draw: st.DrawFn) -> RunResult:
    picked = draw(st.lists(states, min_size=0, max_size=8))
    stories = [
        story(f"US-{n:03d}", state, attempts=draw(st.integers(0, 4)))
        for n, state in enumerate(picked, start=1)
    ]
    ready = draw(st.booleans()) and all(
        s in (StoryState.PASSED, StoryState.UNVERIFIED) for s in picked
    )
    return result(
        stories=stories,
        ready=ready,
        draft_reason=None if ready else "a story did not pass",
        per_test_results=draw(st.booleans()),
        stop_reason=StopReason.ALL_STORIES_PASSED
        if all(s is StoryState.PASSED for s in picked)
        else draw(
            st.sampled_from([r for r in StopReason if r is not StopReason.ALL_STORIES_PASSED])
        ),
    )


@given(run_results())
def test_the_headline_counts_agree_with_the_stories_table(run: RunResult) -> None:
    body = render_pr_body(run)
    headline = HEADLINE_RE.search(body)
    assert headline is not None
    total, counted = int(headline.group(1)), headline.group(2)
    rows = [ICON_STATES[icon] for icon, _ in ROW_RE.findall(body)]
    assert total == len(rows) == len(run.stories)
    claimed = {}
    if counted != "none planned":
        for part in counted.split(", "):
            number, state = part.split(" ", 1)
            claimed[StoryState(state)] = int(number)
    assert claimed == {s: rows.count(s) for s in set(rows)}
    if "every story passed" in body or "all stories passed" in body:
        assert all(s is StoryState.PASSED for s in rows)


def test_one_story_and_a_text_requirement_read_as_english() -> None:
    body = render_pr_body(
        result(requirement_source="text", project="", stories=[story("US-001", StoryState.PASSED)])
    )
    assert "**1 story: 1 passed** for the requirement given as text on" in body
    assert "1 stories" not in body and "`text`" not in body


def test_agent_text_cannot_close_other_issues_or_ping_people() -> None:
    hostile = story("US-001", StoryState.PASSED).model_copy(
        update={
            "title": "Export, closes #2",
            "acceptance_criteria": ["Fixes octo/other#7 and tell @octocat"],
        }
    )
    body = render_pr_body(result(stories=[hostile], project="Resolves #3"), closes_issue=12)
    closing = re.findall(r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s*:?\s+\S*#\d+", body, re.I)
    assert closing == ["Closes #12"]  # reqdrive's own, for the triggering issue, and no other
    assert not re.search(r"(?<![\w`])@[A-Za-z0-9]", body)
    assert "Export, c\u200dloses #2" in body  # still readable


def test_one_attempt_and_a_repeated_reason_read_as_english() -> None:
    no_change = AttemptRecord(
        iteration=1, attempt=1, outcome=AttemptOutcome.NO_CHANGES, reason="no changes"
    )
    failed = story("US-001", StoryState.FAILED).model_copy(update={"attempts": [no_change]})
    body = render_pr_body(result(stories=[failed], ready=False, draft_reason="x"))
    assert "1 agent attempt," in body and "1 agent attempts" not in body
    assert "- attempt 1: no changes\n" in body + "\n" and "no changes: no changes" not in body
    two = render_pr_body(result())
    assert "2 agent attempts," in two


def test_each_storys_frozen_tests_commit_and_what_was_reverted_are_shown() -> None:
    frozen = FrozenTests(
        parent="p" * 40,
        commit="f" * 40,
        tests=["tests.test_api::test_export"],
        reverted=["app.py"],
    )
    passed = story("US-001", StoryState.PASSED, frozen=frozen)
    passed.attempts[0].tests_reverted = ["tests/test_api.py"]
    together = story("US-002", StoryState.PASSED)
    body = render_pr_body(result(stories=[passed, together]))

    assert "| US-001 | `tests.test_api::test_export` | `ffffffffffff` |" in body
    assert "US-001 changed tests/test_api.py while implementing: reverted" in body
    assert "| US-002 | the story's tests were not frozen | — |" in body
    assert "US-001 tests call: reverted `app.py` (not on the test side)" in body
    assert "proven with" not in body  # the whole suite ran on the parent


def test_a_proof_run_on_the_story_test_modules_alone_says_so() -> None:
    frozen = FrozenTests(
        parent="p" * 40,
        commit="f" * 40,
        tests=["tests.test_api::test_export"],
        proof_selected=["tests/test_api.py"],
    )
    body = render_pr_body(result(stories=[story("US-001", StoryState.PASSED, frozen=frozen)]))
    assert "tests frozen in ffffffffffff (proven with tests/test_api.py alone)" in body


def test_a_passing_test_changed_on_the_plans_word_is_a_row_of_its_own() -> None:
    frozen = FrozenTests(
        parent="p" * 40, commit="f" * 40, changed_passing=["tests.test_api::test_status"]
    )
    changes = [ChangedTest(path="tests/test_api.py", reason="201, not 200")]
    record = story("US-001", StoryState.NEEDS_REVIEW, frozen=frozen, changes_tests=changes)
    body = render_pr_body(result(stories=[record], ready=False))
    assert (
        "| US-001 | changed a passing test: `tests.test_api::test_status` | `ffffffffffff` "
        "| tests/test_api.py: 201, not 200; needs review |"
    ) in body


def test_a_run_whose_tests_were_written_with_the_code_says_they_were_not_frozen() -> None:
    body = render_pr_body(result())
    assert "The stories' tests were not frozen (`tests: together`)" in body


def test_a_flaky_test_is_shown_as_flaky_and_where_results_were_not_run_again() -> None:
    flaky = TestCheck(
        id="t::clock",
        before="passed",
        after="failed",
        flaky=True,
        reruns="with the story: failed, passed, failed; without it: passed, passed, failed",
    )
    attempt = AttemptRecord(iteration=1, attempt=1, outcome=AttemptOutcome.PASSED, tests=[flaky])
    record = story("US-001", StoryState.PASSED).model_copy(update={"attempts": [attempt]})
    body = render_pr_body(
        result(
            stories=[record],
            per_test_results=True,
            flaky_tests={"t::clock": f"US-001: {flaky.reruns}"},
            final_gates_from="iteration 1 (US-001 attempt 1)",
            baseline_cached="0123456789ab, measured by run run-1",
        )
    )
    assert (
        "- `t::clock`: flaky, kept out of the verdict (with the story: failed, passed, failed; "
        "without it: passed, passed, failed)" in body
    )
    assert "### Flaky tests (kept out of the verdict)" in body
    assert "- `t::clock`: US-001: with the story: failed, passed, failed;" in body
    assert "same checks, in iteration 1 (US-001 attempt 1)." in body
    assert "(cache entry 0123456789ab, measured by run run-1)" in body


def test_fail_to_pass_is_counted_as_the_verdict_counts_it() -> None:
    passed = AttemptRecord(
        iteration=1,
        attempt=1,
        outcome=AttemptOutcome.NEEDS_REVIEW,
        tests=[
            # Not the story's own: it appeared and passes, which proves nothing of the story.
            TestCheck(id="t::other", before="missing", after="passed"),
            # The story's own, skipped before it: it never failed without the change.
            TestCheck(id="t::skipped", before="skipped", after="passed", owned=True),
            TestCheck(id="t::old", before="passed", after="passed"),
        ],
    )
    record = story("FB-001", StoryState.NEEDS_REVIEW).model_copy(update={"attempts": [passed]})
    assert story_states.tests_line(record) == "0 fail→pass, 1 pass→pass"
    proven = TestCheck(
        id="t::new", before="missing", after="passed", owned=True, added=True, at_parent="failed"
    )
    record = record.model_copy(
        update={"attempts": [passed.model_copy(update={"tests": [*passed.tests, proven]})]}
    )
    assert story_states.tests_line(record) == "1 fail→pass, 1 pass→pass"
    assert [c.id for c in record.attempts[-1].tests if fail_to_pass(c)] == ["t::new"]
