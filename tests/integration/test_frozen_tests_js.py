"""Frozen tests with a real Node runner (jest, pinned, from the npm registry): the implement
call cannot pass a story by rewriting the expected value inside its JavaScript test. The
scripted agent is a real process; jest runs the repository's real tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_pipeline import MakeProject, Project, project_factory
from tests.integration.test_pipeline_collectors import (
    EXPECTED,
    JS_IDS,
    jest_project,
    js_op,
    js_test,
    run,
)
from worker.model.state import AttemptOutcome, StoryState

ADD_STUB = "module.exports = (a, b) => 0;\n"


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)  # tests: first, the default


def stub_project(make_project: MakeProject) -> Project:
    """The collectors' jest repository with the maintainer's failing add test (test-first)
    and add.js a stub returning 0."""
    return jest_project(make_project, ops=("add",), files={"add.js": ADD_STUB})


def test_rewriting_the_expected_value_in_a_frozen_js_test_is_reverted_and_fails(
    make_project: MakeProject,
) -> None:
    project = stub_project(make_project)
    test_file = (project.tmp / "source" / "add.test.js").read_text()
    assert f"toBe({EXPECTED['add']})" in test_file
    # The tests call has nothing to add (the plan's test fails on the base); the implement
    # call makes the stub's answer the expected one and touches the code in name only.
    cheat: dict[str, Any] = {
        "tests": {},
        "implement": {
            "write": {
                "add.test.js": test_file.replace(f"toBe({EXPECTED['add']})", "toBe(0)"),
                "add.js": "// adds\n" + ADD_STUB,
            }
        },
    }
    result = run(project, {"US-001": [cheat]}, {"add": [JS_IDS["add"]]})

    [add] = result.stories
    assert add.state is StoryState.FAILED, [(a.outcome, a.reason) for a in add.attempts]
    assert not result.ready
    last = add.attempts[-1]
    assert last.outcome is AttemptOutcome.GATES_FAILED, last.reason
    assert last.tests_reverted == ["add.test.js"]
    assert "US-001 changed add.test.js while implementing: reverted" in last.reason
    assert JS_IDS["add"] in last.reason
    [check] = [c for c in last.tests if c.id == JS_IDS["add"]]
    assert (check.before, check.after) == ("failed", "failed")
    assert result.draft_reason  # the PR is a draft, and says why


def test_honest_js_stories_in_the_same_repository_pass_and_are_ready(
    make_project: MakeProject,
) -> None:
    project = stub_project(make_project)
    # US-001 is judged on the maintainer's test; US-002's tests call writes its own, a new
    # test module, which is proven on its parent alone (jest selects the file).
    honest = {"tests": {}, "implement": js_op("add", "a + b")}
    mul_test = {"write": {"mul.test.js": js_test("mul", EXPECTED["mul"])}}
    mul = {"tests": mul_test, "implement": js_op("mul", "a * b")}
    result = run(
        project, {"US-001": [honest], "US-002": [mul]}, {"add": [JS_IDS["add"]], "mul": []}
    )

    assert [s.state for s in result.stories] == [StoryState.PASSED] * 2, [
        (a.outcome, a.reason) for s in result.stories for a in s.attempts
    ]
    [check] = [c for c in result.stories[0].attempts[-1].tests if c.owned]
    assert (check.id, check.before, check.after) == (JS_IDS["add"], "failed", "passed")
    frozen = result.stories[1].frozen
    assert frozen is not None
    assert (frozen.proof_selected, frozen.at_parent) == (["mul.test.js"], {JS_IDS["mul"]: "failed"})
    assert result.ready, result.draft_reason
