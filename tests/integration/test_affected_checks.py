"""`checks: affected` end to end: each story's commit judged on the test files its change
reaches, the whole suite once at the head, and a test it finds broken traced to the story
that broke it (real git, the scripted agent as a real process, pytest as the gate)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.integration.test_pipeline import MakeProject, Project, implement, prd, story_commits
from tests.integration.test_pipeline import make_project as make_project
from worker.model.state import AttemptOutcome, StoryState

AFFECTED = {"checks": "affected"}
# registry.py as test_names.py reaches it, through a name it computes, which no import graph
# sees; test_registry.py imports it plainly, so a change to it has tests to run.
REGISTRY = {
    "registry.py": "def names():\n    return ['a']\n",
    "helpers.py": "def shout(text):\n    return text.upper()\n",
    "tests/test_registry.py": (
        "import registry\n\n\ndef test_module():\n    assert registry.__name__ == 'registry'\n"
    ),
    "tests/test_names.py": (
        "import importlib\n\nimport helpers\n\n\n"
        "def test_names():\n"
        "    module = importlib.import_module('regi' + 'stry')\n"
        "    assert module.names() == ['a']\n\n\n"
        "def test_shout():\n"
        "    assert helpers.shout('a') == 'A'\n"
    ),
}


def checks(project: Project) -> dict[str, list[dict[str, Any]]]:
    """Each check's gates as its run folder keeps them, by label."""
    run_dir = project.run_dir()
    return {
        p.name.removesuffix(".gates.json"): json.loads(p.read_text())
        for p in sorted(run_dir.glob("*.gates.json"))
    }


def selected(gates: list[dict[str, Any]]) -> list[str] | None:
    [tests] = [g for g in gates if g["name"] == "tests"]
    scope: list[str] | None = tests["selected"]
    return scope


def story_checks(project: Project) -> dict[str, list[dict[str, Any]]]:
    """The story commits' own checks (not proofs, re-runs or the final ones)."""
    return {
        label: gates
        for label, gates in checks(project).items()
        if re.fullmatch(r"iteration-\d+", label)
    }


def with_break(n: int) -> dict[str, Any]:
    """Story n's honest change, plus a change to the registry no import reaches."""
    change = implement(n)
    change["write"]["registry.py"] = "def names():\n    return []\n"
    return change


def test_honest_stories_are_judged_on_their_own_files_and_the_head_on_the_whole_suite(
    make_project: MakeProject,
) -> None:
    # A gate that runs no tests runs whole on every story's commit beside the narrowed one.
    project = make_project({**AFFECTED, "lintCommand": "test -f registry.py"}, REGISTRY)
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(3)}],
            "stories": {f"US-00{n}": [implement(n)] for n in (1, 2, 3)},
        }
    )
    result = project.run(scenario)

    assert [s.state for s in result.stories] == [StoryState.PASSED] * 3
    assert result.ready, result.draft_reason
    assert project.branch_log() == story_commits(1, 2, 3)
    # Each story's check ran its own test file alone: nothing else imports feature_<n>.
    ran = [selected(g) for g in story_checks(project).values()]
    assert ran == [[f"tests.test_feature_{n}", f"tests/test_feature_{n}.py"] for n in (1, 2, 3)]
    for gates, n in zip(story_checks(project).values(), (1, 2, 3), strict=True):
        tests, lint = gates
        assert set(tests["tests"]) == {f"tests.test_feature_{n}::test_feature_{n}"}
        assert (lint["name"], lint["selected"], lint["passed"]) == ("lint", None, True)
    # Each check ran exactly the files its tests' proof ran on the parent, narrowed as there:
    # it is the like-with-like run, and none runs again.
    assert not any(label.endswith(".alike") for label in checks(project))
    # The head was judged by the whole suite once, not reused from a partial check.
    final = checks(project)["verification"]
    assert selected(final) is None
    assert "tests.test_names::test_names" in final[0]["tests"]
    summary = json.loads((project.run_dir() / "verification-summary.json").read_text())
    assert summary["gates_reused_from"] is None
    assert not any(label.startswith("verification.bisect") for label in checks(project))


def test_a_test_the_whole_suite_finds_broken_is_traced_to_the_story_that_broke_it(
    make_project: MakeProject,
) -> None:
    project = make_project(AFFECTED, REGISTRY)
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(3)}],
            "stories": {
                "US-001": [implement(1)],
                "US-002": [with_break(2)],
                "US-003": [implement(3)],
            },
        }
    )
    result = project.run(scenario)

    states = {s.id: s.state for s in result.stories}
    assert states == {
        "US-001": StoryState.PASSED,
        "US-002": StoryState.NEEDS_REVIEW,
        "US-003": StoryState.PASSED,
    }
    broken = result.stories[1].attempts[-1]
    assert broken.outcome is AttemptOutcome.NEEDS_REVIEW
    assert "tests.test_names::test_names" in broken.reason
    assert "fails from this story's commit on" in broken.reason
    assert not result.ready
    assert "US-002 (needs review)" in (result.draft_reason or "")
    # Its own check could not see it: it ran its own tests and the file importing registry.
    labels = list(story_checks(project))
    assert selected(story_checks(project)[labels[1]]) == [
        "tests.test_feature_2",
        "tests/test_feature_2.py",
        "tests/test_registry.py",
    ]
    # Its check ran more than its proof's files: its tests ran again as the proof ran them.
    assert f"{labels[1]}.alike" in checks(project)
    # Bisected: the head's run of it alone, then the stories' commits between.
    assert any(label.startswith("verification.bisect") for label in checks(project))
    progress = (project.run_dir() / "progress.txt").read_text()
    assert "tests.test_names::test_names to US-002" in progress


def test_a_later_story_reaching_a_test_an_earlier_one_broke_is_not_blamed_for_it(
    make_project: MakeProject,
) -> None:
    # US-002 breaks test_names unseen; US-003 changes helpers.py, which test_names.py
    # imports, so its check runs that file: test_names fails there and passed at the
    # baseline, but no check ran it on US-003's parent. Re-run there, it fails every time:
    # broken before US-003, which passes; the end traces it to US-002.
    project = make_project(AFFECTED, REGISTRY)
    third = implement(3)
    third["write"]["helpers.py"] = "def shout(text):\n    return text.upper() + ''\n"
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(3)}],
            "stories": {"US-001": [implement(1)], "US-002": [with_break(2)], "US-003": [third]},
        }
    )
    result = project.run(scenario)

    states = {s.id: s.state for s in result.stories}
    assert states["US-003"] is StoryState.PASSED
    assert states["US-002"] is StoryState.NEEDS_REVIEW
    third_check = result.stories[2].attempts[-1]
    assert "tests/test_names.py" in (selected([g.to_json() for g in third_check.gates]) or [])
    [names] = [c for c in third_check.tests if c.id == "tests.test_names::test_names"]
    assert names.problem == "" and not names.flaky
    assert "without it: failed, failed" in (names.reruns or "")
    assert not result.ready


def test_a_one_story_run_checks_the_whole_suite_once(make_project: MakeProject) -> None:
    project = make_project(AFFECTED, REGISTRY)
    scenario = project.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    result = project.run(scenario)

    assert result.ready, result.draft_reason
    [check] = story_checks(project).values()
    assert selected(check) is None
    summary = json.loads((project.run_dir() / "verification-summary.json").read_text())
    assert summary["gates_reused_from"] == "iteration 1 (US-001 attempt 1)"


def test_the_default_checks_every_story_on_the_whole_suite(
    make_project: MakeProject, tmp_path: Path
) -> None:
    project = make_project(None, REGISTRY)
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(2)}],
            "stories": {"US-001": [implement(1)], "US-002": [with_break(2)]},
        }
    )
    result = project.run(scenario)

    assert all(selected(g) is None for g in story_checks(project).values())
    # The whole suite saw the break at US-002's own check: it failed there.
    assert result.stories[1].state is not StoryState.PASSED
