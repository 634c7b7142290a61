"""What the agent cannot do: outlive its timeout, see the worker's secrets, leak a token."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_pipeline import (
    PYTEST,
    MakeProject,
    git,
    implement,
    prd,
    project_factory,
)
from tests.support.processes import running
from worker.confine.redact import REDACTED, Redactor
from worker.model.state import AttemptOutcome, StoryState
from worker.report.run_folder import RunFolder

TOKEN = "ghp_" + "a1B2c3D4e5" * 4  # a GitHub personal token's shape
WORKER_SECRET = "worker-only-secret-value-42"


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def frozen_part(steps: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in steps["write"].items() if k.startswith("tests/")}


def test_a_hanging_agent_is_killed_at_the_timeout_with_its_setsid_child(
    make_project: MakeProject,
) -> None:
    # The timeout also bounds attempt 2, a real Python process: 2 s was tight on a loaded VM.
    project = make_project({"agent": {"timeout": 5}, "maxStoryRetries": 2})
    pids_file = project.tmp / "pids.txt"
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(1)}],
            "stories": {
                "US-001": [
                    {
                        # Its tests are frozen; the implement call hangs.
                        "tests": {"write": frozen_part(implement(1))},
                        "implement": {
                            "hang": 300,
                            "pids_file": str(pids_file),
                            "write": {"half_done.py": "x = 1\n"},
                        },
                    },
                    implement(1),
                ]
            },
        }
    )
    result = project.run(scenario)

    agent_pid, child_pid = (int(p) for p in pids_file.read_text().split())
    assert not running(agent_pid) and not running(child_pid)
    first, second = result.stories[0].attempts
    assert first.outcome is AttemptOutcome.AGENT_TIMED_OUT
    assert "did not finish within 5s" in first.reason
    assert second.outcome is AttemptOutcome.PASSED
    # What the hung attempt left behind did not reach the branch.
    assert "half_done.py" not in project.branch_files()
    assert result.ready


def test_the_agent_sees_no_worker_secret_and_its_printed_token_is_in_no_file(
    make_project: MakeProject, tmp_path: Path
) -> None:
    # The gates run the repository's code: they get the agent's scrubbed environment too.
    gate_env = tmp_path / "gate-env.txt"
    project = make_project({"testCommand": f"env >> {gate_env}; {PYTEST}"})
    env_dump = project.tmp / "agent-env.json"
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(1), "print": f"planning with {TOKEN}"}],
            "stories": {
                "US-001": [
                    {**implement(1), "print": f"my token is {TOKEN}", "dump_env": str(env_dump)}
                ]
            },
        }
    )
    worker_env = {
        "PATH": "/usr/bin:/bin",
        "GITHUB_TOKEN": WORKER_SECRET,
        "REDIS_URL": "redis://:hunter2-password@127.0.0.1:6379/0",
        "GITHUB_PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----",
        "ANTHROPIC_API_KEY": "sk-ant-api03-" + "k" * 30,
    }
    result = project.run(scenario, source_env=worker_env, secrets=(WORKER_SECRET,))
    assert result.stories[0].state is StoryState.PASSED

    seen = json.loads(env_dump.read_text())
    assert "GITHUB_TOKEN" not in seen and "REDIS_URL" not in seen
    assert "GITHUB_PRIVATE_KEY" not in seen
    assert seen["ANTHROPIC_API_KEY"] == worker_env["ANTHROPIC_API_KEY"]  # its own key it keeps
    gate_names = {line.split("=", 1)[0] for line in gate_env.read_text().splitlines()}
    assert "PATH" in gate_names
    assert not gate_names & {"GITHUB_TOKEN", "REDIS_URL", "GITHUB_PRIVATE_KEY"}
    files = [p for p in project.run_dir().rglob("*") if p.is_file()]
    assert any("my token is [REDACTED]" in p.read_text() for p in files)
    for path in files:
        text = path.read_text(errors="replace")
        assert TOKEN not in text, path
        assert worker_env["ANTHROPIC_API_KEY"] not in text, path


def test_an_agent_claiming_passes_true_for_failing_tests_is_recorded_as_failed(
    make_project: MakeProject,
) -> None:
    project = make_project({"maxStoryRetries": 1})
    scenario = project.scenario(
        {
            "plan": [{"prd": prd(1)}],
            "stories": {"US-001": [{**implement(1, correct=False), "claim_passes": True}]},
        }
    )
    result = project.run(scenario)
    record = result.stories[0]
    assert record.state is StoryState.FAILED
    assert record.attempts[0].outcome is AttemptOutcome.GATES_FAILED
    assert not result.ready
    # Nothing passed, so nothing was pushed.
    assert git(project.remote, "branch", "--list", "reqdrive/*") == ""
    stored = json.loads((project.run_dir() / "prd.json").read_text())
    assert stored["userStories"][0]["passes"] is False


def test_the_run_folder_redacts_what_it_writes_and_sweeps_what_others_wrote(
    tmp_path: Path,
) -> None:
    folder = RunFolder(tmp_path / "run", Redactor([WORKER_SECRET]))
    folder.write_text("a.txt", f"value {WORKER_SECRET} and {TOKEN}")
    assert (tmp_path / "run/a.txt").read_text() == "value [REDACTED] and [REDACTED]"
    folder.sweep()
    # The agent writes into the folder behind the worker's back, one file even back-dated.
    fresh, backdated = tmp_path / "run/agent.txt", tmp_path / "run/old.txt"
    fresh.write_text(f"leak {TOKEN}")
    backdated.write_text(f"leak {TOKEN}")
    os.utime(backdated, (0, 0))
    folder.sweep()
    assert fresh.read_text() == "leak [REDACTED]"
    assert TOKEN in backdated.read_text()  # skipped by the quick sweep between calls
    folder.sweep(full=True)
    assert backdated.read_text() == "leak [REDACTED]"


API_KEY = "sk-ant-api03-" + "s3cr3t" * 6


@pytest.mark.parametrize(
    ("leaky_file", "content", "named"),
    [
        ("feature_1.py", f"KEY = {API_KEY!r}\n\n\ndef value():\n    return 1\n", "feature_1.py"),
        # A NUL byte makes git call the file binary: its diff shows no lines to scan.
        ("assets/key.bin", f"\0{API_KEY}\0", "assets/key.bin"),
        # An added line "++ ..." reads "+++ ..." in the diff, like a file header.
        ("notes.txt", f"++ {API_KEY}\n", "notes.txt"),
        # The secret is the file's name; an empty file has no added line at all.
        (f"{API_KEY}.txt", "", f"{REDACTED}.txt"),
    ],
)
def test_a_change_holding_a_secret_value_is_never_committed_or_pushed(
    make_project: MakeProject, leaky_file: str, content: str, named: str
) -> None:
    project = make_project({"maxStoryRetries": 2})
    # The agent pastes its own API key into what it writes, then does it properly.
    leaky = implement(1)
    leaky["write"][leaky_file] = content
    scenario = project.scenario(
        {"plan": [{"prd": prd(1)}], "stories": {"US-001": [leaky, implement(1)]}}
    )
    result = project.run(
        scenario, source_env={"PATH": "/usr/bin:/bin", "ANTHROPIC_API_KEY": API_KEY}
    )

    first, second = result.stories[0].attempts
    assert first.outcome is AttemptOutcome.CREDENTIAL_IN_CHANGE
    assert named in first.reason and API_KEY not in first.reason and first.commit is None
    assert second.outcome is AttemptOutcome.PASSED
    # Not in any object the remote received, not only not in the branch's last tree.
    pushed = git(project.remote, "log", "-p", "--text", "--all")
    assert "feature_1.py" in pushed and API_KEY not in pushed
