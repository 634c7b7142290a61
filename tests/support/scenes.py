"""Scenes for the deployed stack: a Python project on the GitHub double with an issue asking for
features, and the scripted agent that builds them inside the sandbox."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.integration.test_pipeline import GITIGNORE, PYTEST, SCRIPTED_AGENT, implement, prd
from tests.support.github_double import GitHubDouble
from tests.support.harness import Stack, sandbox_readonly, sandbox_works

# Each call's log in the run folder starts with this line of the scripted agent's (the run's
# HOME, the one place outside its worktree the agent may write, is removed when the run ends).
CALL_LINE = "scripted agent: "


@dataclass
class Scene:
    repo: str
    issue: int
    agent_dir: Path  # the scenario the agent reads (bound read-only into the sandbox)
    command: str

    def env(self) -> dict[str, str]:
        """The stack's environment for this scene: the default sandbox (off only where
        bubblewrap cannot work), no pacing."""
        env = {
            "REQDRIVE_AGENT_COMMAND": self.command,
            "REQDRIVE_SANDBOX_READONLY": sandbox_readonly(self.agent_dir),
            "REQDRIVE_GITHUB_REQUEST_INTERVAL_S": "0",
            "REQDRIVE_GITHUB_WRITE_INTERVAL_S": "0",
        }
        if not sandbox_works():
            env["REQDRIVE_SANDBOX"] = "off"
        return env


def shop(
    tmp_path: Path,
    double: GitHubDouble,
    repo: str = "octo/shop",
    *,
    role: str = "write",
    stories: dict[str, list[dict[str, Any]]] | None = None,
    plan: dict[str, Any] | None = None,
    title: str = "Features",
    installation: int = 1,
    tests: str = "together",
) -> Scene:
    """`repo` on the double (a project whose tests pass, with a reqdrive config), an issue
    asking for two features, `alice` with `role`, and a scripted agent planning two stories
    (or `plan`) and building them (or doing `stories`).

    `tests`: the repository's `tests` mode. The deployed scenes are about the App's flows
    (pushes, retries, crashes, two repositories), so they make one agent call per story
    unless a scene asks for tests first (test_deployed.py's happy path does)."""
    name = repo.replace("/", "-")
    source = tmp_path / f"{name}-source"
    _project(source, tests)
    double.add_repository(repo, source, installation=installation)
    config = (source / ".github/reqdrive.yml").read_text()
    double.set_file(repo, "main", ".github/reqdrive.yml", config)
    double.set_role(repo, "alice", role)
    issue = double.add_issue(repo, title, "Build features one and two.")
    agent_dir = tmp_path / f"{name}-agent"
    agent_dir.mkdir()
    scenario = {
        "plan": [{"prd": plan or prd(2)}],
        "stories": stories or {"US-001": [implement(1)], "US-002": [implement(2)]},
    }
    (agent_dir / "scenario.json").write_text(json.dumps(scenario))
    command = (
        f"{sys.executable} {SCRIPTED_AGENT} --scenario {agent_dir / 'scenario.json'} "
        "--prompt {prompt_file} --run-dir {run_dir}"
    )
    return Scene(repo, issue, agent_dir, command)


def _project(source: Path, tests: str) -> None:
    settings = {
        "testCommand": PYTEST,
        "tests": tests,
        "agent": {"runner": "command", "timeout": 120},
    }
    files = {
        ".gitignore": GITIGNORE,
        ".github/reqdrive.yml": yaml.safe_dump(settings),
        "tests/test_base.py": "def test_base():\n    assert True\n",
    }
    for path, text in files.items():
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_text(text)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "initial"]):
        subprocess.run(["git", *args], cwd=source, check=True, capture_output=True)


def agent_calls(running: Stack) -> dict[str, list[str]]:
    """Each run's agent calls as the scripted agent printed them into its call logs ("plan 1",
    "US-001 1"), by run id, in the order they were made."""
    calls = {}
    for run in sorted((running.work_dir / "runs").glob("*/")):
        logs = sorted(run.glob("iteration-*.log"), key=lambda log: log.stat().st_mtime_ns)
        lines = [line for log in logs for line in log.read_text(errors="replace").splitlines()]
        made = [line.removeprefix(CALL_LINE) for line in lines if line.startswith(CALL_LINE)]
        if made:
            calls[run.name] = made
    return calls


def all_calls(running: Stack) -> list[str]:
    """Every agent call of every run (one run: its calls in order)."""
    return [call for calls in agent_calls(running).values() for call in calls]
