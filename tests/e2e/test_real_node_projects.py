"""Real Node projects as their maintainers publish them (npm tarballs with their own suites,
pinned, fetched at test time): `reqdrive init` → `validate` → `run` with the sandbox on, `setup`
installing the project's dependencies from the registry, and a scripted agent applying the
project's own past fix, which this test reverted in the base commit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_run_cli import environment
from tests.integration.test_pipeline import SCRIPTED_AGENT
from tests.support.node_projects import MPATH, PROJECTS, NodeCheckout, NodeProject, checkout
from worker.local.exit_codes import ExitCode

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]
REQUIREMENT = "docs/requirements/REQ-001-fix.md"
RUN_TIMEOUT_S = 600


def reqdrive(
    repo: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "bot.cli", *args]
    return subprocess.run(
        argv,
        cwd=repo,
        env=env or environment(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )


def configured(project: NodeProject, tmp_path: Path, *, retries: int = 3) -> NodeCheckout:
    """The checkout after `reqdrive init`, its suggested setup taken, the requirement written
    and both committed: what a maintainer does before the first run."""
    co = checkout(project, tmp_path)
    done = reqdrive(co.root, "init")
    assert done.returncode == 0, done.stderr
    config = co.root / ".github/reqdrive.yml"
    text = config.read_text()
    assert "junit: reqdrive-junit.xml" in text, text  # init found the runner's own reporter
    assert '# setup: "npm install' in text, text  # no lockfile in a tarball: npm install
    text = text.replace('# setup: "npm install', 'setup: "npm install')
    config.write_text(text.replace("maxStoryRetries: 3", f"maxStoryRetries: {retries}"))
    (co.root / "docs/requirements/REQ-001-example.md").unlink()
    (co.root / REQUIREMENT).write_text(project.requirement)
    git(co.root, "add", "-A")
    git(co.root, "-c", "user.name=m", "-c", "user.email=m@x", "commit", "-qm", "reqdrive")
    done = reqdrive(co.root, "validate")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ok: .github/reqdrive.yml, 1 requirement(s)"), done.stdout
    return co


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def scenario(project: NodeProject, fix_text: str, folder: Path) -> Path:
    """One story claiming the tests the revert broke; its attempt writes `fix_text`."""
    story = {
        "id": "US-001",
        "title": project.requirement.splitlines()[0].split(": ", 1)[1],
        "description": "Put the fix back.",
        "acceptanceCriteria": ["the reverted test passes again"],
        "priority": 1,
        "passes": False,
        "attempts": 0,
        "notes": "",
        "tests": list(project.failing),
    }
    prd = {"version": "1", "project": project.name, "sourceReq": "REQ-001", "userStories": [story]}
    data: dict[str, Any] = {
        "plan": [{"prd": prd}],
        "stories": {"US-001": [{"write": {project.fix_file: fix_text}}]},
    }
    path = folder / "scenario.json"
    path.write_text(json.dumps(data))
    return path


def run(
    co: NodeCheckout, project: NodeProject, fix_text: str, tmp_path: Path, *, network: str = ""
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    agent_io = tmp_path / "agent-io"  # shown read-only in the sandbox, like a toolchain
    agent_io.mkdir()
    plan = scenario(project, fix_text, agent_io)
    env = environment()
    if network:
        env["REQDRIVE_SANDBOX_NETWORK"] = network
    env["REQDRIVE_SANDBOX_READONLY"] = os.pathsep.join(
        [sys.prefix, sys.base_prefix, str(SCRIPTED_AGENT.parent), str(agent_io)]
    )
    template = (
        f"{sys.executable} {SCRIPTED_AGENT} --scenario {plan} "
        "--prompt {prompt_file} --run-dir {run_dir}"
    )
    done = reqdrive(
        co.root,
        "run", REQUIREMENT, "--json", "--sandbox", "on", "--run-id", "fix",
        "--agent", "command", "--agent-command", template,
        "--work-dir", str(tmp_path / "work"),
        env=env,
    )  # fmt: skip
    if done.returncode == ExitCode.PREFLIGHT_FAILED and "the setup `npm install" in done.stderr:
        # Not skipped: the projects' dependencies come from the registry at test time.
        pytest.fail(f"npm install from the registry failed in the sandbox:\n{done.stderr[-3000:]}")
    return done, json.loads(done.stdout) if done.stdout.strip() else {}


@pytest.mark.parametrize("project", PROJECTS, ids=[p.name for p in PROJECTS])
def test_the_projects_own_fix_makes_a_ready_pull_request(
    project: NodeProject, tmp_path: Path
) -> None:
    co = configured(project, tmp_path)
    done, outcome = run(co, project, co.fixed_text, tmp_path)

    assert done.returncode == ExitCode.SUCCESS, done.stderr
    assert outcome["ready"] is True, done.stderr
    assert [(s["id"], s["state"]) for s in outcome["stories"]] == [("US-001", "passed")]
    pr = (Path(outcome["run_dir"]) / "pr.md").read_text()
    assert "**Ready for review**: every story passed and the final checks are green." in pr
    for test_id in project.failing:  # the story was judged on the test the revert broke
        assert f"`{test_id}` (owned): failed → passed" in pr, pr
    assert "setup" in done.stderr and "npm install" in done.stderr
    branch = outcome["branch"]
    assert git(co.root, "show", f"{branch}:{project.fix_file}") == co.fixed_text.rstrip("\n")
    # The story's change is the fix alone: not what the setup or the checks wrote.
    assert git(co.root, "diff", "--name-only", f"main...{branch}") == project.fix_file


def test_a_wrong_fix_makes_a_draft_naming_the_failing_test(tmp_path: Path) -> None:
    project = MPATH
    co = configured(project, tmp_path, retries=1)
    done, outcome = run(co, project, co.wrong_text, tmp_path)

    assert done.returncode == ExitCode.NOT_READY, done.stderr
    assert outcome["ready"] is False
    assert [(s["id"], s["state"]) for s in outcome["stories"]] == [("US-001", "failed")]
    assert list(outcome["still_failing"]) == list(project.failing)
    pr = (Path(outcome["run_dir"]) / "pr.md").read_text()
    assert "**Draft**: 1 of 1 stories did not pass: US-001 (failed)." in pr
    [failing] = project.failing
    assert f"`{failing}`: US-001 owns it and ended failed" in pr


def test_npx_in_a_worktree_without_node_modules_stops_at_the_baseline_with_the_fix(
    tmp_path: Path,
) -> None:
    # The maintainer's checkout has node_modules (mocha 5, as mpath pins it), the config no
    # setup; reqdrive's worktree lives in the work dir, outside the checkout, without it.
    # npx, given a registry, would run the newest mocha instead and judge every story on it.
    co = checkout(MPATH, tmp_path)
    (co.root / ".gitignore").write_text("node_modules/\nreqdrive-junit.xml\n")
    installed = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund"],
        cwd=co.root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if installed.returncode != 0:
        pytest.fail(f"npm install from the registry failed:\n{installed.stderr[-3000:]}")
    (co.root / ".github").mkdir()
    (co.root / ".github/reqdrive.yml").write_text(
        "gates:\n  - name: tests\n    junit: reqdrive-junit.xml\n"
        "    command: npx mocha test/* --reporter xunit"
        " --reporter-options output=reqdrive-junit.xml\n"
    )
    (co.root / "docs/requirements").mkdir(parents=True)
    (co.root / REQUIREMENT).write_text(MPATH.requirement)
    git(co.root, "add", "-A")
    git(co.root, "-c", "user.name=m", "-c", "user.email=m@x", "commit", "-qm", "reqdrive")
    assert reqdrive(co.root, "validate").returncode == 0

    # The checks may reach the package registries: npx could download.
    done, outcome = run(co, MPATH, co.fixed_text, tmp_path, network="registries")

    assert done.returncode == ExitCode.PREFLIGHT_FAILED, done.stderr
    assert "the tests check cannot start" in done.stderr
    assert "npx found no mocha in the worktree's node_modules and would download it" in done.stderr
    assert "`setup: npm ci` in .github/reqdrive.yml" in done.stderr
    assert outcome.get("stories", []) == []  # no plan: nothing an agent does could help
    assert not (tmp_path / "work/runs/fix/prd.json").exists()
    assert "unverified" not in done.stderr
