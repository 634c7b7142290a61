"""What a run pays for: flaky tests re-run before they count, results not measured twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.test_pipeline import (
    ONE_CALL,
    PYTEST,
    MakeProject,
    Project,
    implement,
    prd,
    project_factory,
)
from worker.model.repo_config import RepoConfig
from worker.model.state import AttemptOutcome, StoryState
from worker.run.spec import Requirement

# A test that fails on every other run, wherever it runs: its count lives outside the worktree.
FLAKY_TEST = """from pathlib import Path

COUNT = Path({count!r})


def test_clock():
    runs = int(COUNT.read_text()) if COUNT.exists() else 0
    COUNT.write_text(str(runs + 1))
    assert runs % 2 == 0
"""
FLAKY_ID = "tests.test_clock::test_clock"


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def counted(project: Project) -> int:
    """How many times the tests gate ran (its command appends a line per run)."""
    log = project.tmp / "gate-runs.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def counting_project(make_project: MakeProject, tmp_path: Path) -> Project:
    return make_project({"testCommand": f"echo run >> {tmp_path / 'gate-runs.log'}; {PYTEST}"})


def other_requirement() -> Requirement:
    return Requirement(
        text="# REQ-002\nSomething else.\n",
        source="docs/requirements/REQ-002-other.md",
        slug="req-002-other",
        repo_path="docs/requirements/REQ-002-other.md",
    )


def test_a_flaky_test_does_not_fail_the_story_and_is_shown_as_flaky(
    make_project: MakeProject, tmp_path: Path
) -> None:
    # One attempt per story: a flaky failure held against the story would end it failed.
    # Its check runs are counted (baseline, then the story's): one call per story.
    project = make_project(
        {"maxStoryRetries": 1, **ONE_CALL},
        files={"tests/test_clock.py": FLAKY_TEST.format(count=str(tmp_path / "clock.count"))},
    )
    # The baseline runs it first (passes); the story's own run is the second (fails).
    result = project.run(
        project.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    )

    (story,) = result.stories
    assert story.state is StoryState.PASSED, story.attempts[-1].reason
    (attempt,) = story.attempts
    assert attempt.outcome is AttemptOutcome.PASSED and attempt.reason == ""
    clock = next(c for c in attempt.tests if c.id == FLAKY_ID)
    assert (clock.before, clock.after, clock.flaky, clock.problem) == (
        "passed",
        "failed",
        True,
        "",
    )
    # Run again alone, twice on the story's commit and twice on its parent.
    assert clock.reruns == (
        "with the story: failed, passed, failed; without it: passed, passed, failed"
    )
    assert result.flaky_tests == {FLAKY_ID: f"US-001: {clock.reruns}"}
    assert result.ready, result.draft_reason
    body = (project.run_dir() / "pr.md").read_text()
    assert f"- `{FLAKY_ID}`: flaky, kept out of the verdict (with the story:" in body
    assert "### Flaky tests (kept out of the verdict)" in body
    summary = json.loads((project.run_dir() / "verification-summary.json").read_text())
    assert list(summary["flaky_tests"]) == [FLAKY_ID]


def test_the_final_checks_reuse_the_results_that_judged_the_head(
    make_project: MakeProject, tmp_path: Path
) -> None:
    project = counting_project(make_project, tmp_path)
    scenario = project.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    result = project.run(scenario)

    assert result.ready, result.draft_reason
    # The baseline, the story's own run, its new test on its parent and again on the story's
    # commit as it ran there (like with like); not the head's whole suite once more.
    assert counted(project) == 4
    run_dir = project.run_dir()
    summary = json.loads((run_dir / "verification-summary.json").read_text())
    assert summary["gates_reused_from"] == "iteration 1 (US-001 attempt 1)"
    assert summary["all_gates_passed"] is True
    assert not (run_dir / "verification.gates.json").exists()
    assert "the same checks, in iteration 1 (US-001 attempt 1)." in (run_dir / "pr.md").read_text()


def test_a_second_run_on_the_same_base_reuses_its_baseline_unless_the_gates_differ(
    make_project: MakeProject, tmp_path: Path
) -> None:
    project = counting_project(make_project, tmp_path)
    scenario = project.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    project.run(scenario)
    first = json.loads((project.run_dir() / "run.json").read_text())
    assert first["baseline_from_cache"] is None
    runs_before = counted(project)

    # Another requirement on the same base: planned only, so only a baseline could run.
    project.run(scenario, run_id="run-2", requirement=other_requirement(), plan_only=True)
    assert counted(project) == runs_before  # neither the baseline nor the final checks ran
    second = json.loads((project.run_dir("run-2") / "run.json").read_text())
    assert second["baseline_from_cache"].endswith(", measured by run run-1")
    assert "(from the cache:" in (project.run_dir("run-2") / "progress.txt").read_text()

    # The same tree with another gate command: measured again, never the cached results.
    config = RepoConfig.model_validate(
        {"testCommand": f"echo other >> {tmp_path / 'gate-runs.log'}; {PYTEST} -x"}
    )
    project.run(
        scenario,
        run_id="run-3",
        requirement=other_requirement(),
        plan_only=True,
        config_override=(config, ".github/reqdrive.yml"),
    )
    third = json.loads((project.run_dir("run-3") / "run.json").read_text())
    assert third["baseline_from_cache"] is None
    assert counted(project) == runs_before + 1  # the baseline; the final checks reuse it


# A command that logs "run" for a run of the whole suite and "only" for one limited to chosen
# tests (the worker names them in REQDRIVE_ONLY): the log lives outside the worktree.
def selecting_project(make_project: MakeProject, tmp_path: Path, **files: str) -> Project:
    log = tmp_path / "gate-runs.log"
    command = f'echo "${{REQDRIVE_ONLY:+only}}${{REQDRIVE_ONLY:-run}}" | cut -c1-4 >> {log}; '
    return make_project({"testCommand": command + PYTEST}, files=files or None)


def whole_runs(project: Project) -> tuple[int, int]:
    """(runs of the whole suite, runs of chosen tests only)."""
    log = project.tmp / "gate-runs.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return lines.count("run"), lines.count("only")


def test_the_proof_of_a_new_test_module_runs_only_its_tests(
    make_project: MakeProject, tmp_path: Path
) -> None:
    project = selecting_project(make_project, tmp_path)
    scenario = project.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    result = project.run(scenario)

    assert result.ready, result.draft_reason
    (story,) = result.stories
    assert story.frozen is not None
    assert story.frozen.at_parent == {"tests.test_feature_1": "failed"}
    # The baseline and the implement attempt run the whole suite; the proof its new module,
    # on the parent and, as it ran there, on the story's commit.
    assert whole_runs(project) == (2, 2)
    assert story.frozen.proof_selected == ["tests/test_feature_1.py"]


def test_the_proof_of_a_changed_conftest_runs_the_whole_suite(
    make_project: MakeProject, tmp_path: Path
) -> None:
    project = selecting_project(make_project, tmp_path)
    story = implement(1)
    fixture = "import pytest\n\n\n@pytest.fixture\ndef one():\n    return 1\n"
    story["write"]["tests/conftest.py"] = fixture
    scenario = project.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [story]}})
    result = project.run(scenario)

    assert result.ready, result.draft_reason
    (record,) = result.stories
    # A conftest may change every test's state: the proof is a whole run (beside the
    # baseline, the implement attempt and its checks with the test configuration as it was),
    # as the story's commit's own, so nothing runs again narrowed there.
    assert whole_runs(project) == (4, 0)
    assert record.frozen is not None and record.frozen.proof_selected == []


def test_a_base_whose_setup_installed_another_version_is_measured_again(
    make_project: MakeProject, tmp_path: Path
) -> None:
    # The setup resolves its dependency outside the repository (no lockfile pins it): the
    # same tree and config, another version installed.
    version = tmp_path / "dep-version"
    version.write_text("1.0")
    setup = (
        "mkdir -p .venv/lib/dep.dist-info && "
        f'printf "Name: dep\\nVersion: %s\\n" "$(cat {version})" > .venv/lib/dep.dist-info/METADATA'
    )
    project = make_project(
        {"setup": setup, "testCommand": f"echo run >> {tmp_path / 'gate-runs.log'}; {PYTEST}"}
    )
    scenario = project.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    project.run(scenario, plan_only=True)
    project.run(scenario, run_id="run-2", requirement=other_requirement(), plan_only=True)
    second = json.loads((project.run_dir("run-2") / "run.json").read_text())
    assert second["baseline_from_cache"].endswith(", measured by run run-1")
    runs_before = counted(project)

    version.write_text("2.0")
    project.run(scenario, run_id="run-3", requirement=other_requirement(), plan_only=True)
    third = json.loads((project.run_dir("run-3") / "run.json").read_text())
    assert third["baseline_from_cache"] is None
    assert counted(project) == runs_before + 1


def test_the_proof_on_the_parent_does_not_collect_the_rest_of_the_suite(
    make_project: MakeProject, tmp_path: Path
) -> None:
    # An existing module that notes each import, outside the worktree: each collection of the
    # whole suite imports it.
    imports = tmp_path / "imports.log"
    existing = (
        f"with open({str(imports)!r}, 'a') as log:\n    log.write('imported\\n')\n\n\n"
        "def test_existing():\n    pass\n"
    )
    project = selecting_project(make_project, tmp_path, **{"tests/test_existing.py": existing})
    scenario = project.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    result = project.run(scenario)

    assert result.ready, result.draft_reason
    (story,) = result.stories
    assert story.frozen is not None and story.frozen.at_parent == {"tests.test_feature_1": "failed"}
    assert whole_runs(project) == (2, 2)
    # The baseline and the implement attempt imported it; the proof of the new module did
    # not, on the parent nor on the story's commit.
    assert imports.read_text().splitlines() == ["imported", "imported"]
