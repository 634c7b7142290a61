"""The engine end to end on real git (a bare remote) with the scripted agent as a real process."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.pytest_command import QUIET_PLUGINS
from tests.support.shared_seed import SHARED_SEED
from worker.exceptions import PrdError
from worker.model.state import AttemptOutcome, RunResult, StopReason, StoryState
from worker.report.console import ConsoleReporter
from worker.run.checkpoint_file import FileCheckpointStore
from worker.run.pipeline import Pipeline
from worker.run.spec import Requirement, RunSpec

ROOT = Path(__file__).resolve().parents[2]
SCRIPTED_AGENT = ROOT / "tests" / "support" / "scripted_agent.py"
# The checks of the tests' repositories run reqdrive's own interpreter, where hypothesis is
# installed for reqdrive's tests: its pytest plugin, rewritten by pytest in every check's fresh
# bytecode folder, would cost each check about two seconds for nothing these repositories use.
PYTEST = f"{sys.executable} -m pytest -q {QUIET_PLUGINS}"
GITIGNORE = "__pycache__/\n*.pyc\n"


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def story(n: int, priority: int | None = None) -> dict[str, Any]:
    return {
        "id": f"US-00{n}",
        "title": f"Feature {n}",
        "description": f"As a user I want feature {n}",
        "acceptanceCriteria": [f"feature_{n}.value() returns {n}"],
        "priority": priority if priority is not None else n,
        "passes": False,
        "attempts": 0,
        "notes": "",
    }


def story_commits(*numbers: int) -> list[str]:
    """The branch's commits for these stories, oldest first: each story's frozen tests, then
    its code (tests: first, the default)."""
    return [f"{kind}: [US-00{n}] - Feature {n}" for n in numbers for kind in ("test", "feat")]


def story_calls(*numbers: int, attempt: int = 1) -> list[str]:
    """The agent calls of these stories' attempts: its tests call, then its implement call."""
    return [call for n in numbers for call in (f"US-00{n} {attempt} tests", f"US-00{n} {attempt}")]


def prd(count: int) -> dict[str, Any]:
    return {
        "version": "1",
        "project": "Demo",
        "sourceReq": "REQ-001",
        "userStories": [story(n) for n in range(1, count + 1)],
    }


def implement(n: int, *, correct: bool = True, commit: str | None = None) -> dict[str, Any]:
    """A story attempt that writes feature_<n>.py and its test; `correct` decides if it passes."""
    value = n if correct else -1
    steps: dict[str, Any] = {
        "write": {
            f"feature_{n}.py": f"def value():\n    return {value}\n",
            f"tests/test_feature_{n}.py": (
                f"import feature_{n}\n\n\ndef test_feature_{n}():\n"
                f"    assert feature_{n}.value() == {n}\n"
            ),
        }
    }
    if commit:
        steps["commit"] = commit
    return steps


@dataclass
class Project:
    """A repository on a bare remote, and where runs of it keep their state."""

    tmp: Path
    remote: Path
    work_dir: Path

    def scenario(self, data: dict[str, Any]) -> Path:
        data.setdefault("calls_log", str(self.tmp / "calls.log"))
        path = self.tmp / "scenario.json"
        path.write_text(json.dumps(data))
        return path

    def agent_command(self, scenario: Path) -> str:
        return (
            f"{sys.executable} {SCRIPTED_AGENT} --scenario {scenario} "
            "--prompt {prompt_file} --run-dir {run_dir}"
        )

    def spec(self, scenario: Path, *, run_id: str = "run-1", **extra: Any) -> RunSpec:
        requirement = Requirement(
            text="# REQ-001\nBuild features one to four.\n",
            source="docs/requirements/REQ-001-demo.md",
            slug="req-001-demo",
            repo_path="docs/requirements/REQ-001-demo.md",
        )
        values: dict[str, Any] = {
            "run_id": run_id,
            "requirement": requirement,
            "remote_url": str(self.remote),
            "work_dir": self.work_dir,
            "base_ref": "main",
            "agent_runner": "command",
            "agent_command": self.agent_command(scenario),
            "source_env": {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            "bytecode_seed": SHARED_SEED,
        }
        values.update(extra)
        return RunSpec(**values)

    def run(self, scenario: Path, **extra: Any) -> RunResult:
        spec = self.spec(scenario, **extra)
        store = FileCheckpointStore(self.work_dir / "runs")
        self.console = io.StringIO()
        pipeline = Pipeline(spec, reporter=ConsoleReporter(self.console), checkpoints=store)
        return pipeline.run()

    def run_dir(self, run_id: str = "run-1") -> Path:
        return self.work_dir / "runs" / run_id

    def calls(self) -> list[str]:
        log = self.tmp / "calls.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return [line.split(" pid=")[0] for line in lines]

    def branch_log(self, branch: str = "reqdrive/req-001-demo") -> list[str]:
        return git(self.remote, "log", "--format=%s", f"main..{branch}").splitlines()[::-1]

    def branch_files(self, branch: str = "reqdrive/req-001-demo") -> list[str]:
        return git(self.remote, "ls-tree", "-r", "--name-only", branch).splitlines()


MakeProject = Callable[..., Project]


# The config of a suite whose stories are one agent call each (tests: together): what
# single-call mechanics (collectors' verdicts, budgets per call, re-run counts) are tested on.
ONE_CALL = {"tests": "together"}


def project_factory(tmp_path: Path, defaults: dict[str, Any] | None = None) -> MakeProject:
    """Builds a project (source repo, bare remote, work dir) with config and extra files;
    `defaults` go under each project's own config."""

    def make(
        config: dict[str, Any] | None = None, files: dict[str, str | None] | None = None
    ) -> Project:
        source = tmp_path / "source"
        source.mkdir()
        git(source, "init", "-q", "-b", "main")
        settings = {
            "testCommand": PYTEST,
            "agent": {"timeout": 60},
            **(defaults or {}),
            **(config or {}),
        }
        content = {
            ".gitignore": GITIGNORE,
            ".github/reqdrive.yml": yaml.safe_dump(settings),
            ".github/workflows/ci.yml": "on: push\n",
            "docs/requirements/REQ-001-demo.md": "# REQ-001\nBuild features one to four.\n",
            "tests/test_base.py": "def test_base():\n    assert True\n",
            **(files or {}),
        }
        for name, text in content.items():
            if text is None:  # leave out a default file
                continue
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_text(text)
        git(source, "add", "-A")
        git(source, "commit", "-qm", "initial")
        remote = tmp_path / "remote.git"
        git(tmp_path, "clone", "-q", "--bare", str(source), str(remote))
        return Project(tmp=tmp_path, remote=remote, work_dir=tmp_path / "work")

    return make


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def test_all_stories_pass_with_one_commit_each_every_gate_green_and_ready(
    make_project: MakeProject,
) -> None:
    project = make_project()
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(3)}],
            # US-002's agent commits twice itself; the worker squashes that into one commit.
            "stories": {
                "US-001": [implement(1)],
                "US-002": [{**implement(2), "commit": "wip"}],
                "US-003": [implement(3)],
            },
        }
    )
    result = project.run(scenario)

    assert [s.state for s in result.stories] == [StoryState.PASSED] * 3
    # Each story's tests first (frozen), then its code (tests: first, the default).
    assert project.branch_log() == [
        "test: [US-001] - Feature 1",
        "feat: [US-001] - Feature 1",
        "test: [US-002] - Feature 2",
        "feat: [US-002] - Feature 2",
        "test: [US-003] - Feature 3",
        "feat: [US-003] - Feature 3",
    ]
    assert result.ready and result.draft_reason is None
    assert result.stop_reason is StopReason.ALL_STORIES_PASSED
    assert all(g.passed for g in result.final_gates) and result.final_gates
    assert result.head_sha == git(project.remote, "rev-parse", "reqdrive/req-001-demo")
    run_dir = project.run_dir()
    for name in (
        "run.json",
        "prd.json",
        "progress.txt",
        "iteration-1.prompt.md",
        "iteration-1.log",
        "iteration-1.gates.json",
        "verification-summary.json",
        "changes.patch",
        "pr.md",
    ):
        assert (run_dir / name).exists(), name
    summary = json.loads((run_dir / "verification-summary.json").read_text())
    assert summary["ready"] is True and summary["stories"]["passed"] == 3
    assert "+def value():" in (run_dir / "changes.patch").read_text()
    assert "**Ready for review**" in (run_dir / "pr.md").read_text()
    stored = json.loads((run_dir / "prd.json").read_text())
    assert [(s["passes"], s["attempts"]) for s in stored["userStories"]] == [(True, 1)] * 3
    assert project.calls() == [
        "plan 1",
        *("US-001 1 tests", "US-001 1"),
        *("US-002 1 tests", "US-002 1"),
        *("US-003 1 tests", "US-003 1"),
    ]


def test_a_story_failing_once_is_retried_with_the_failing_test_output_in_its_prompt(
    make_project: MakeProject,
) -> None:
    project = make_project()
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(2)}],
            "stories": {
                "US-001": [implement(1, correct=False), implement(1)],
                "US-002": [implement(2)],
            },
        }
    )
    result = project.run(scenario)

    first = result.stories[0]
    assert first.state is StoryState.PASSED
    assert [a.outcome for a in first.attempts] == [
        AttemptOutcome.GATES_FAILED,
        AttemptOutcome.PASSED,
    ]
    run_dir = project.run_dir()
    retry_prompt = (run_dir / "iteration-2.prompt.md").read_text()
    assert "Attempt: 2 of 3" in retry_prompt
    assert "Why the previous attempt failed" in retry_prompt
    assert "assert -1 == 1" in retry_prompt and "test_feature_1" in retry_prompt
    # The failed attempt's commit is gone from the branch; its diff is kept beside the run.
    # Its frozen tests stayed: the retry was only the implement call.
    assert project.branch_log() == [
        "test: [US-001] - Feature 1",
        "feat: [US-001] - Feature 1",
        "test: [US-002] - Feature 2",
        "feat: [US-002] - Feature 2",
    ]
    assert project.calls()[1:4] == ["US-001 1 tests", "US-001 1", "US-001 2"]
    assert "return -1" in (run_dir / "iteration-1.patch").read_text()
    assert result.ready


def test_a_story_that_never_passes_stops_at_max_story_retries_and_leaves_a_draft(
    make_project: MakeProject,
) -> None:
    project = make_project({"maxStoryRetries": 2})
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(2)}],
            # The agent also claims success each time; the worker does not believe it.
            "stories": {
                "US-001": [{**implement(1, correct=False), "claim_passes": True}],
                "US-002": [implement(2)],
            },
        }
    )
    result = project.run(scenario)

    failed, passed = result.stories
    assert failed.state is StoryState.FAILED and len(failed.attempts) == 2
    assert passed.state is StoryState.PASSED
    assert project.calls().count("US-001 1") == 1 and project.calls().count("US-001 2") == 1
    assert "US-001 3" not in project.calls()
    assert not result.ready
    assert result.draft_reason == "1 of 2 stories did not pass: US-001 (failed)"
    assert result.stop_reason is StopReason.STORIES_SETTLED
    assert project.branch_log() == ["test: [US-002] - Feature 2", "feat: [US-002] - Feature 2"]
    stored = json.loads((project.run_dir() / "prd.json").read_text())
    assert stored["userStories"][0]["passes"] is False
    body = (project.run_dir() / "pr.md").read_text()
    assert "**Draft**: 1 of 2 stories did not pass: US-001 (failed)" in body


def test_a_run_superseded_by_a_newer_text_stops_after_the_story_it_is_on(
    make_project: MakeProject,
) -> None:
    project = make_project()
    scenario = project.scenario(
        {"plan": [{"prd": prd(2)}], "stories": {"US-001": [implement(1)], "US-002": [implement(2)]}}
    )
    # The newer text arrives while US-001 runs: asked again before US-002, the run stops.
    superseded = lambda: project.calls() != ["plan 1"]  # noqa: E731
    result = project.run(scenario, superseded=superseded)

    assert project.calls() == ["plan 1", "US-001 1 tests", "US-001 1"]
    first, second = result.stories
    assert first.state is StoryState.PASSED and second.state is StoryState.PENDING
    assert result.stop_reason is StopReason.SUPERSEDED and not result.ready
    assert result.draft_reason == "the requirement was edited, so it runs again on the new text"
    assert project.branch_log() == ["test: [US-001] - Feature 1", "feat: [US-001] - Feature 1"]


@pytest.mark.parametrize(
    ("tests", "outcome", "reason"),
    [
        ("together", AttemptOutcome.NO_CHANGES, "no changes"),
        # Tests first: the tests call already changed nothing, so no code call is made.
        ("first", AttemptOutcome.TESTS_REFUSED, "the tests call wrote no test for the story"),
    ],
)
def test_an_attempt_that_changes_nothing_fails_with_reason_no_changes(
    make_project: MakeProject, tests: str, outcome: AttemptOutcome, reason: str
) -> None:
    project = make_project({"maxStoryRetries": 1, "tests": tests})
    scenario = project.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [{}]}})
    result = project.run(scenario)
    attempt = result.stories[0].attempts[0]
    assert (attempt.outcome, attempt.reason) == (outcome, reason)
    assert result.stories[0].state is StoryState.FAILED and not result.ready


def test_writes_to_forbidden_paths_are_reverted_recorded_and_not_committed(
    make_project: MakeProject,
) -> None:
    project = make_project()
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(2)}],
            "stories": {
                "US-001": [
                    {
                        "write": {
                            **implement(1)["write"],
                            ".github/workflows/x.yml": "on: push\njobs: {}\n",
                            ".github/workflows/ci.yml": "hacked\n",
                            # Its own config, to make the checks pass trivially next time.
                            ".github/reqdrive.yml": "testCommand: 'true'\n",
                        }
                    }
                ],
                # This one commits the forbidden file itself; it must still not reach the branch.
                "US-002": [
                    {
                        "write": {
                            **implement(2)["write"],
                            "docs/requirements/REQ-001-demo.md": "Do less.\n",
                        },
                        "commit": "agent commit",
                    }
                ],
            },
        }
    )
    result = project.run(scenario)

    assert [s.state for s in result.stories] == [StoryState.PASSED] * 2
    first, second = (s.attempts[0] for s in result.stories)
    assert sorted(first.forbidden_writes) == [
        ".github/reqdrive.yml",
        ".github/workflows/ci.yml",
        ".github/workflows/x.yml",
    ]
    assert second.forbidden_writes == ["docs/requirements/REQ-001-demo.md"]
    files = project.branch_files()
    assert ".github/workflows/x.yml" not in files
    branch = "reqdrive/req-001-demo"
    assert git(project.remote, "show", f"{branch}:.github/workflows/ci.yml") == "on: push"
    assert git(project.remote, "show", f"{branch}:docs/requirements/REQ-001-demo.md").startswith(
        "# REQ-001"
    )
    assert project.branch_log() == [
        "test: [US-001] - Feature 1",
        "feat: [US-001] - Feature 1",
        "test: [US-002] - Feature 2",
        "feat: [US-002] - Feature 2",
    ]
    assert (
        "reverted forbidden writes: .github/reqdrive.yml, .github/workflows/"
        in (project.run_dir() / "progress.txt").read_text()
    )


def test_planning_that_edits_a_source_file_is_reverted_and_the_attempt_fails(
    make_project: MakeProject,
) -> None:
    project = make_project()
    scenario = project.scenario(
        {
            "plan": [
                {"prd": prd(1), "write": {"tests/test_base.py": "broken\n", "new.txt": "x"}},
                {"prd": prd(1)},
            ],
            "stories": {"US-001": [implement(1)]},
        }
    )
    result = project.run(scenario)

    assert project.calls()[:2] == ["plan 1", "plan 2"]
    progress = (project.run_dir() / "progress.txt").read_text()
    assert "planning attempt 1 failed: planning must not change the repository" in progress
    assert "tests/test_base.py" in progress
    assert (
        "Your previous attempt was refused"
        in (project.run_dir() / "iteration-plan-2.prompt.md").read_text()
    )
    assert result.ready
    assert "new.txt" not in project.branch_files()
    assert git(project.remote, "show", "reqdrive/req-001-demo:tests/test_base.py").startswith("def")


def test_planning_that_commits_is_reverted_too(make_project: MakeProject) -> None:
    project = make_project()
    scenario = project.scenario(
        {
            "plan": [
                {"prd": prd(1), "write": {"sneaky.py": "x = 1\n"}, "commit": "plan commit"},
                {"prd": prd(1)},
            ],
            "stories": {"US-001": [implement(1)]},
        }
    )
    result = project.run(scenario)
    assert result.ready
    assert project.branch_log() == ["test: [US-001] - Feature 1", "feat: [US-001] - Feature 1"]


def test_caches_planning_leaves_behind_are_removed_without_failing_the_attempt(
    make_project: MakeProject,
) -> None:
    # A real agent runs the tests while it reads the code: __pycache__/ and .pytest_cache
    # appear, both ignored by git. They are no change to the repository.
    project = make_project()
    listing = project.tmp / "story-sees.txt"
    run_tests = [sys.executable, "-m", "pytest", "-q"]
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(1), "write": {"build/cache.pyc": "x"}, "run": run_tests}],
            "stories": {"US-001": [{**implement(1), "list_files": str(listing)}]},
        }
    )
    result = project.run(scenario)

    assert project.calls() == ["plan 1", "US-001 1 tests", "US-001 1"]
    assert "planning attempt 1 failed" not in (project.run_dir() / "progress.txt").read_text()
    assert result.ready
    seen = listing.read_text().splitlines()
    assert "tests/test_base.py" in seen
    # The gates' own caches may stay (they run with -p no:cacheprovider); planning's are gone.
    assert not [name for name in seen if name.startswith((".pytest_cache/", "build/"))]


def test_an_invalid_prd_twice_fails_the_run_naming_what_is_wrong(
    make_project: MakeProject,
) -> None:
    project = make_project()
    bad = prd(2)
    bad["userStories"][1]["id"] = "US-001"
    scenario = project.scenario({"plan": [{"prd_raw": "{not json"}, {"prd": bad}]})
    with pytest.raises(PrdError) as caught:
        project.run(scenario)
    assert "planning failed 2 times" in str(caught.value)
    assert "story id 'US-001' is used more than once" in str(caught.value)
    progress = (project.run_dir() / "progress.txt").read_text()
    assert "prd.json is not valid JSON" in progress
    run = json.loads((project.run_dir() / "run.json").read_text())
    assert (run["status"], run["step"]) == ("failed", "plan")


def test_an_agent_that_fails_without_a_plan_is_named_with_its_exit_code(
    make_project: MakeProject,
) -> None:
    project = make_project()
    scenario = project.scenario({"plan": [{"exit_code": 3}]})
    with pytest.raises(PrdError) as caught:
        project.run(scenario)
    assert "did not write prd.json" in str(caught.value)
    assert str(caught.value).endswith("(it exited with code 3)")


def test_a_repository_prompt_override_on_the_base_commit_is_used_with_text_kept_literal(
    make_project: MakeProject,
) -> None:
    override = "Story ID: {{ story.id }}\nAttempt: {{ attempt }}\nHOUSE STYLE\n{{ requirement }}"
    project = make_project(
        files={
            ".reqdrive/prompts/story.md.j2": override,
            "docs/requirements/REQ-001-demo.md": "Compute {{ 7*7 }} please.\n",
        }
    )
    scenario = project.scenario({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    spec = project.spec(scenario)
    requirement = replace(spec.requirement, text="Compute {{ 7*7 }} please.\n")
    result = project.run(scenario, requirement=requirement)
    assert result.ready
    prompt = (project.run_dir() / "iteration-1.prompt.md").read_text()
    assert prompt == "Story ID: US-001\nAttempt: 1\nHOUSE STYLE\nCompute {{ 7*7 }} please.\n"


def test_a_plan_only_run_starts_no_story_however_late_its_reporter_hears(
    make_project: MakeProject,
) -> None:
    project = make_project()
    scenario = project.scenario({"plan": [{"prd": prd(2)}], "stories": {"US-001": [implement(1)]}})

    class SlowReporter(ConsoleReporter):
        # Reporters are fed on a background thread: one that is slow to hear of the plan
        # must not be what stops the run (`reqdrive plan` and `/reqdrive plan` relied on it).
        def plan_ready(self, stories: Any) -> None:
            time.sleep(1.0)
            super().plan_ready(stories)

    spec = project.spec(scenario, plan_only=True)
    store = FileCheckpointStore(project.work_dir / "runs")
    result = Pipeline(spec, reporter=SlowReporter(io.StringIO()), checkpoints=store).run()

    assert project.calls() == ["plan 1"]
    assert [s.state for s in result.stories] == [StoryState.PENDING] * 2
    assert all(not s.attempts for s in result.stories)
    assert (project.run_dir() / "prd.json").exists()
