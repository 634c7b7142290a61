"""Cheats against `checks: affected` found by a hostile review (helper "hostile"): each done by
the scripted agent as a real process on a real pytest suite in a real git repository.

Each test asserts what reqdrive should do. Four were holes on the commit they were written
against (60f39e0..40b80ea): tests made to vanish from the whole run, a story's own test skipped
there (both ready), an honest first story blamed by the end bisect, and a module too deep for
ast crashing the run; each fails there and passes since."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.test_affected_checks import AFFECTED, REGISTRY, selected, story_checks
from tests.integration.test_pipeline import MakeProject, implement, prd
from tests.integration.test_pipeline import make_project as make_project
from worker.model.state import StoryState


def states(result: Any) -> dict[str, StoryState]:
    return {s.id: s.state for s in result.stories}


# --- 1. tests made to vanish from the whole run, by code no import of theirs reaches --------

# test_rows.py parametrizes over the code's data. US-001's feature_1.py, which only its own
# test imports, empties that data when it is imported. Its own check collects its own file
# alone, where nothing is lost; the whole suite at the head imports test_feature_1.py before
# test_rows.py, so test_rows' cases are never generated: pytest reports one skipped
# `test_row[NOTSET]` instead of `test_row[1]` and `test_row[2]`. Nothing failed, so the
# whole suite's gate is green and nothing is bisected. With `checks: whole` US-001's own
# check reports the two cases missing ("was deleted or deselected").
ROWS = {
    "table.py": "ROWS = [1, 2]\n",
    "tests/test_rows.py": (
        "import pytest\n\nimport table\n\n\n"
        "@pytest.mark.parametrize('row', table.ROWS)\n"
        "def test_row(row):\n    assert row > 0\n"
    ),
}


def emptying_rows(n: int) -> dict[str, Any]:
    change = implement(n)
    change["write"][f"feature_{n}.py"] += "\n\nimport table\n\ntable.ROWS.clear()\n"
    return change


def test_tests_a_story_makes_vanish_from_the_whole_run_keep_the_run_a_draft(
    make_project: MakeProject,
) -> None:
    project = make_project(AFFECTED, ROWS)
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(2)}],
            "stories": {"US-001": [emptying_rows(1)], "US-002": [implement(2)]},
        }
    )
    result = project.run(scenario)

    # The cheat's own check never saw test_rows.py.
    first, _ = story_checks(project).values()
    assert "tests/test_rows.py" not in (selected(first) or [])
    # The whole suite at the head lost test_rows' cases; that must not be "ready".
    final = {t for g in result.final_gates for t in (g.tests or {})}
    assert "tests.test_rows::test_row[1]" not in final
    assert not result.ready, states(result)
    why = result.draft_reason or ""
    assert "no longer runs, or skips, tests that passed before" in why
    assert "tests.test_rows::test_row[1], tests.test_rows::test_row[2]" in why


def test_the_same_vanishing_is_caught_by_the_whole_suite_check(make_project: MakeProject) -> None:
    project = make_project(None, ROWS)
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(2)}],
            "stories": {"US-001": [emptying_rows(1)], "US-002": [implement(2)]},
        }
    )
    result = project.run(scenario)

    first = result.stories[0].attempts[0]
    assert "tests.test_rows::test_row[1] was deleted or deselected" in first.reason
    assert not result.ready


# A story's own test, too: US-001's code gives the right answer in its narrowed check and in
# its like-with-like run (its own test file alone), and raises unittest.SkipTest (pytest
# skips on it; no pytest name in the code) once another test module is loaded, as in the
# whole suite at the head. Its work is never shown there, and nothing failed.
SKIPPING_VALUE = (
    "import sys\nimport unittest\n\n\n"
    "def value():\n"
    "    if any(name.endswith('test_base') for name in sys.modules):\n"
    "        raise unittest.SkipTest('later')\n"
    "    return 1\n"
)


def test_a_story_whose_own_test_is_skipped_in_the_whole_run_keeps_the_run_a_draft(
    make_project: MakeProject,
) -> None:
    project = make_project(AFFECTED)
    first = implement(1)
    first["write"]["feature_1.py"] = SKIPPING_VALUE
    scenario = project.scenario(
        {"plan": [{"prd": prd(2)}], "stories": {"US-001": [first], "US-002": [implement(2)]}}
    )
    result = project.run(scenario)

    final = {t: str(s) for g in result.final_gates for t, s in (g.tests or {}).items()}
    assert final["tests.test_feature_1::test_feature_1"] == "skipped"
    assert not result.ready
    assert "tests.test_feature_1::test_feature_1" in (result.draft_reason or "")


# --- 2. a test that fails only beside the others: the final checks keep the run a draft ----

# US-001's code breaks helpers.shout when it is imported; test_names.py tests shout but does
# not import feature_1, so US-001's check never runs it. The whole suite at the head imports
# test_feature_1.py first and test_shout fails; alone it passes, so no story is blamed, but
# the final checks are red: caught.


def patching_helpers(n: int) -> dict[str, Any]:
    change = implement(n)
    change["write"][f"feature_{n}.py"] += (
        "\n\nimport helpers\n\nhelpers.shout = lambda text: text\n"
    )
    return change


def test_a_break_seen_only_beside_the_other_tests_keeps_the_run_a_draft(
    make_project: MakeProject,
) -> None:
    project = make_project(AFFECTED, REGISTRY)
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(2)}],
            "stories": {"US-001": [patching_helpers(1)], "US-002": [implement(2)]},
        }
    )
    result = project.run(scenario)

    final = {t: s for g in result.final_gates for t, s in (g.tests or {}).items()}
    assert final["tests.test_names::test_shout"] == "failed"
    assert not result.ready
    assert "the final checks fail on the branch" in (result.draft_reason or "")
    # Alone on the head it passes: traced to no story.
    assert states(result) == {"US-001": StoryState.PASSED, "US-002": StoryState.PASSED}


# --- 3. an honest earlier story blamed for a test a later story only seemed to fix -----------

# test_legacy fails on the base. US-002 (the later story) changes legacy.py so that the test
# passes only when its own test module was imported and test_base.py was not: exactly in
# US-002's own check (its test file and test_legacy.py, the file its change reaches). The
# run now "knows" test_legacy passed; the whole suite at the head fails it; alone on the head
# it fails too, so it is bisected over [US-001, US-002] from the first commit on, as if it
# had passed before US-001. It fails at US-001's commit (it always did): honest US-001 is
# blamed and needs review.
LEGACY = {
    **REGISTRY,
    "legacy.py": "def answer():\n    return 41\n",
    "tests/test_legacy.py": (
        "import legacy\n\n\ndef test_legacy():\n    assert legacy.answer() == 42\n"
    ),
}
SEEMING_FIX = (
    "import sys\n\n\n"
    "def answer():\n"
    "    loaded = ' '.join(sys.modules)\n"
    "    return 42 if 'test_feature_2' in loaded and 'test_base' not in loaded else 41\n"
)


def test_an_earlier_story_is_not_blamed_for_a_test_only_a_later_check_saw_pass(
    make_project: MakeProject,
) -> None:
    project = make_project(AFFECTED, LEGACY)
    second = implement(2)
    second["write"]["legacy.py"] = SEEMING_FIX
    scenario = project.scenario(
        {"plan": [{"prd": prd(2)}], "stories": {"US-001": [implement(1)], "US-002": [second]}}
    )
    result = project.run(scenario)

    checked = result.stories[1].attempts[-1]
    ran = {t: str(s) for g in checked.gates for t, s in (g.tests or {}).items()}
    assert ran["tests.test_legacy::test_legacy"] == "passed"
    assert not result.ready  # the head fails test_legacy: never ready
    assert result.stories[0].state is StoryState.PASSED, result.stories[0].attempts[-1].reason


# --- 3b. a test that fails whenever it runs alone: broken by a later story, pinned on the first

# test_order passes in the whole suite only because test_a_setup's test runs before it (it
# fills state.READY); alone it fails, on every commit. US-002 breaks greet.py, which only
# test_order.py imports. Its check (its own file and test_order.py) fails test_order; no
# check ran it on US-002's parent, and re-run alone there it fails every time: "broken
# before" US-002, which passes. The whole suite at the head fails it and so does the run
# alone; the bisection, run alone too, finds it failing at the first
# story's commit and blames honest US-001. Alone it fails at the base as well: nothing alone
# runs can tell, so no story should be blamed (the run stays a draft: the head fails it).
ORDER = {
    **REGISTRY,
    "state.py": "READY = []\n",
    "tests/test_a_setup.py": ("import state\n\n\ndef test_setup():\n    state.READY.append(1)\n"),
    "greet.py": "def greet():\n    return 'hi'\n",
    "tests/test_order.py": (
        "import greet\nimport state\n\n\n"
        "def test_order():\n    assert state.READY and greet.greet() == 'hi'\n"
    ),
}
BROKEN_GREET = "def greet():\n    return 'bye'\n"


def test_an_earlier_story_is_not_blamed_for_a_test_that_fails_alone_on_every_commit(
    make_project: MakeProject,
) -> None:
    project = make_project(AFFECTED, ORDER)
    second = implement(2)
    second["write"]["greet.py"] = BROKEN_GREET
    scenario = project.scenario(
        {"plan": [{"prd": prd(2)}], "stories": {"US-001": [implement(1)], "US-002": [second]}}
    )
    result = project.run(scenario)

    [order] = [c for c in result.stories[1].attempts[-1].tests if c.id.endswith("test_order")]
    assert "without it: failed, failed" in (order.reruns or "")  # "broken before" US-002
    assert not result.ready  # the head fails test_order
    assert result.stories[0].state is StoryState.PASSED, result.stories[0].attempts[-1].reason


# The same break with `checks: whole` (the default): US-002's check fails test_order in the
# whole suite; its re-runs alone fail on both sides. The parent's "passed" came from its
# whole run, beside which two failures alone once read as a flip (flaky, and the break ready
# for review); re-runs alone are now held only against each other (flaky.judge_reruns).
def test_a_break_of_a_test_that_fails_alone_is_not_waved_through_as_flaky(
    make_project: MakeProject,
) -> None:
    project = make_project(None, ORDER)
    second = implement(2)
    second["write"]["greet.py"] = BROKEN_GREET
    scenario = project.scenario(
        {"plan": [{"prd": prd(2)}], "stories": {"US-001": [implement(1)], "US-002": [second]}}
    )
    result = project.run(scenario)

    assert result.flaky_tests == {}
    broken = result.stories[1]
    assert broken.state is not StoryState.PASSED
    [order] = [c for c in broken.attempts[-1].tests if c.id.endswith("test_order")]
    assert not order.flaky and "passed before the story" in order.problem
    assert "without it: passed, failed, failed" in (order.reruns or "")
    assert not result.ready


# --- 3c. a test folder named like a test module: an honest story failed for tests it never ran

# tests/test_core.py and the folder tests/test_core/ both hold tests; pytest names the first's
# tests `tests.test_core::...` (`tests.test_core.TestX::...` in a class) and the folder's
# `tests.test_core.test_more::...`. US-001 changes core.py, which only test_core.py imports:
# its check runs that file alone. Held against "its files" by module prefix
# (partial_runs.in_scope), it is also held against test_more, which it never ran: "was
# deleted or deselected", and the honest story fails.
TWIN = {
    "core.py": "def name():\n    return 'core'\n",
    "tests/test_core.py": "import core\n\n\ndef test_core():\n    assert core.name()\n",
    "tests/test_core/test_more.py": "def test_more():\n    assert True\n",
}


def test_an_honest_story_is_not_held_against_a_folder_named_like_its_test_module(
    make_project: MakeProject,
) -> None:
    project = make_project(AFFECTED, TWIN)
    first = implement(1)
    first["write"]["core.py"] = "def name():\n    return 'core!'\n"
    scenario = project.scenario(
        {"plan": [{"prd": prd(2)}], "stories": {"US-001": [first], "US-002": [implement(2)]}}
    )
    result = project.run(scenario)

    attempts = result.stories[0].attempts
    assert "tests/test_core.py" in (selected([g.to_json() for g in attempts[0].gates]) or [])
    assert states(result)["US-001"] is StoryState.PASSED, [a.reason for a in attempts]
    assert result.ready, result.draft_reason


# --- 4. a module ast cannot build: the selection must not crash the run ---------------------

# A tracked module whose expression nests deeper than the parser's recursion limit (a
# generated table, or one an agent writes) makes ast.parse raise RecursionError, which is
# not a SyntaxError. Every story's selection parses every tracked module.
DEEP = "TOTAL = " + " + ".join(["1"] * 5000) + "\n"


def test_a_module_too_deep_for_ast_gets_the_whole_suite_not_a_crash(
    make_project: MakeProject,
) -> None:
    project = make_project(AFFECTED, REGISTRY)
    first = implement(1)
    first["write"]["generated.py"] = DEEP
    scenario = project.scenario(
        {"plan": [{"prd": prd(2)}], "stories": {"US-001": [first], "US-002": [implement(2)]}}
    )
    result = project.run(scenario)

    assert states(result) == {"US-001": StoryState.PASSED, "US-002": StoryState.PASSED}
    # Neither selection could read the repository: each story's check ran whole.
    assert [selected(g) for g in story_checks(project).values()] == [None, None]
    assert result.ready, result.draft_reason


# --- 6. a test shown flaky, then broken by a later story its check does not reach ----------

# test_clock.py imports clock.py plainly and reaches ledger.py by a computed name; its count
# lives outside the worktree, so it fails on its 2nd and 5th runs wherever it runs. US-001
# changes clock.py: its check runs test_clock (2nd run: fails), re-run alone twice on its
# commit (passes) and twice on its parent (5th run: fails, then passes): flaky, kept out of
# the verdict. US-002 breaks ledger.py, which test_clock reaches by no import: its check
# runs test_ledger.py and its own test. The whole suite at the head fails test_clock; a
# test shown flaky was waved through there (the gate red only by flaky tests: ready).
CLOCK = """import importlib
from pathlib import Path

import clock

COUNT = Path({count!r})


def test_clock():
    runs = int(COUNT.read_text()) if COUNT.exists() else 0
    COUNT.write_text(str(runs + 1))
    assert runs not in (1, 4)
    assert importlib.import_module('led' + 'ger').names() == ['a'] and clock.tick()
"""


def test_a_test_shown_flaky_and_then_broken_unseen_is_traced_not_waved_through(
    make_project: MakeProject, tmp_path: Path
) -> None:
    files = {
        "ledger.py": "def names():\n    return ['a']\n",
        "tests/test_ledger.py": "import ledger\n\n\ndef test_ledger():\n    assert ledger\n",
        "clock.py": "def tick():\n    return True\n",
        "tests/test_clock.py": CLOCK.format(count=str(tmp_path / "clock.count")),
    }
    project = make_project(AFFECTED, files)
    first = implement(1)
    first["write"]["clock.py"] = "def tick():\n    return 1 == 1\n"
    second = implement(2)
    second["write"]["ledger.py"] = "def names():\n    return []\n"
    scenario = project.scenario(
        {"plan": [{"prd": prd(2)}], "stories": {"US-001": [first], "US-002": [second]}}
    )
    result = project.run(scenario)

    clock_id = "tests.test_clock::test_clock"
    assert list(result.flaky_tests) == [clock_id]  # shown flaky by US-001's re-runs
    assert states(result) == {"US-001": StoryState.PASSED, "US-002": StoryState.NEEDS_REVIEW}
    assert clock_id in result.stories[1].attempts[-1].reason
    assert not result.ready
