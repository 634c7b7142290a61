"""Real Python projects as their maintainers have them: `reqdrive init` → `validate` → `run`.

Each project is its released sdist (fetched from PyPI at test time, pinned by hash, cached in
.cache/sources/) made a git repository with one real past fix taken out; its own suite, with
the fix's test, then has that test failing. The maintainer answers `init` the way its notes
say (a setup installing the project and pytest from PyPI into .venv), writes the requirement
from the changelog entry, and runs it with the sandbox on: a scripted agent putting the real fix
back is ready for review with the fix's test failed → passed; one making a plausible wrong
change is a draft naming the test still failing. The checks' Python is whatever `python3` the
caller's PATH gives (pyenv on the CI machine): nothing points the sandbox at it by hand.

They need the network to PyPI: the sdist on first use, and the setup's installs on every run.
Without it they fail saying so; they are never skipped for it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.pinned_sources import fetch_pinned, unpack
from tests.support.real_python_projects import PROJECTS, RealProject

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]
SUPPORT = Path(__file__).resolve().parents[1] / "support"
REQDRIVE = Path(sys.executable).parent / "reqdrive"
RUN_TIMEOUT_S = 600
# What init suggests for each of them: a project without a test extra gets pytest beside it.
SUGGESTED_SETUP = "python3 -m venv .venv && .venv/bin/pip install -e . pytest"


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def agent_python() -> tuple[str, list[str]]:
    """The scripted agent's interpreter (it needs the standard library only) and what the
    sandbox must show for it. The system's python3 needs nothing shown: the checks' Python
    is then found by reqdrive alone."""
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system:
        return system, []
    return sys.executable, [sys.prefix, sys.base_prefix]


def checkout_of(project: RealProject, tmp_path: Path) -> Path:
    """The project's sdist as a git repository, its fix's code taken back out."""
    root = unpack(fetch_pinned(project.url, project.sha256), tmp_path / "src")
    source = root / project.fix.path
    text = source.read_text()
    assert text.count(project.fix.fixed) == 1, f"{project.name}: the fix is not in {source}"
    source.write_text(text.replace(project.fix.fixed, project.fix.before))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", f"{project.name} as released, without the fix")
    return root


def environment(readonly: list[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REQDRIVE_", "REDIS_"))}
    env["REQDRIVE_SANDBOX_READONLY"] = os.pathsep.join([str(SUPPORT), *readonly])
    return env


def reqdrive(
    repo: Path, env: dict[str, str], *args: str, timeout: int = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REQDRIVE), *args], cwd=repo, env=env, capture_output=True, text=True, timeout=timeout
    )


def configure(project: RealProject, repo: Path) -> str:
    """What the maintainer does after `init`: its suggested setup uncommented, the test
    command its notes ask for, the requirement over the template; committed. Returns the
    requirement's path."""
    config_path = repo / ".github" / "reqdrive.yml"
    written = config_path.read_text()
    assert f'# setup: "{SUGGESTED_SETUP}"' in written.splitlines()
    config = yaml.safe_load(written)
    config.pop("lintCommand", None)
    setup = SUGGESTED_SETUP + project.setup_extra
    config.update(setup=setup, testCommand=project.test_command, maxStoryRetries=1)
    if project.lint_command:
        config["lintCommand"] = project.lint_command
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    (repo / "docs/requirements/REQ-001-example.md").unlink()
    requirement = f"docs/requirements/REQ-001-{project.slug}.md"
    (repo / requirement).write_text(project.requirement)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "reqdrive: configuration")
    return requirement


def scenario(project: RealProject, repo: Path, folder: Path, name: str, replacement: str) -> Path:
    """The plan giving the fix's failing tests to one story, and the story's one change:
    `fix.before` in the file, as the base commit has it, replaced by `replacement`."""
    story = {
        "id": "US-001",
        "title": project.story_title,
        "description": f"Fix {project.name}: {project.story_title}",
        "acceptanceCriteria": list(project.criteria),
        "priority": 1,
        "tests": list(project.failing_tests),
    }
    plan = {"version": "1", "project": project.name, "sourceReq": "REQ-001"}
    current = (repo / project.fix.path).read_text()  # the checkout is at the base
    assert current.count(project.fix.before) == 1
    change = {"write": {project.fix.path: current.replace(project.fix.before, replacement)}}
    data: dict[str, Any] = {
        "plan": [{"prd": {**plan, "userStories": [story]}}],
        "stories": {"US-001": [change]},
    }
    path = folder / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def run(
    repo: Path,
    env: dict[str, str],
    requirement: str,
    scenario_path: Path,
    run_id: str,
    *,
    expect: int,
) -> subprocess.CompletedProcess[str]:
    """`reqdrive run` with the sandbox on and the scripted agent; fails the test unless it
    exits `expect`, saying so when the setup could not reach PyPI."""
    python, _ = agent_python()
    agent = (
        f"{python} {SUPPORT / 'scripted_agent.py'} --scenario {scenario_path} "
        "--prompt {prompt_file} --run-dir {run_dir}"
    )
    done = reqdrive(
        repo, env, "run", requirement, "--sandbox", "on", "--run-id", run_id,
        "--agent", "command", "--agent-command", agent, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    said = done.stdout + done.stderr
    if done.returncode != expect and "setup: setup FAILED" in done.stdout:
        pytest.fail(
            "the run's setup failed: it installs the project and pytest from PyPI, so these "
            f"tests need the network to pypi.org and files.pythonhosted.org\n{said}"
        )
    assert done.returncode == expect, said
    return done


@pytest.mark.parametrize("project", PROJECTS, ids=[p.name for p in PROJECTS])
def test_a_real_fix_is_ready_for_review_and_a_wrong_one_a_draft(
    project: RealProject, tmp_path: Path
) -> None:
    repo = checkout_of(project, tmp_path)
    agent_io = tmp_path / "agent-io"
    agent_io.mkdir()
    env = environment([str(agent_io), *agent_python()[1]])

    init = reqdrive(repo, env, "init")
    assert init.returncode == 0, init.stderr
    for said in project.init_says:
        assert said in init.stdout, init.stdout
    requirement = configure(project, repo)
    validate = reqdrive(repo, env, "validate")
    assert validate.returncode == 0, validate.stdout + validate.stderr
    assert validate.stdout.startswith("ok: .github/reqdrive.yml, 1 requirement(s)")

    fix = scenario(project, repo, agent_io, "fix", project.fix.fixed)
    fixed = run(repo, env, requirement, fix, "fix", expect=0)

    assert "setup: setup passed" in fixed.stdout
    assert "done: 1 story: 1 passed;" in fixed.stdout and "ready for review" in fixed.stdout
    body = (repo / ".reqdrive/runs/fix/pr.md").read_text()
    assert "**Ready for review**" in body
    for test_id in project.failing_tests:
        assert f"- `{test_id}` (owned): failed → passed" in body
    assert "unverified" not in body
    if project.lint_command:
        assert "but for `lint`, which fails on the base too" in body
    changed = git(repo, "diff", "--name-only", "main", "reqdrive/req-001-" + project.slug)
    assert changed.splitlines() == [project.fix.path]  # no .venv, no egg-info

    if not project.try_wrong_fix:
        return
    wrong = scenario(project, repo, agent_io, "wrong", project.fix.wrong)
    run(repo, env, requirement, wrong, "wrong", expect=9)  # a draft

    # The first run's venv, restored into this run's worktree, works there.
    assert (
        "setup cached: .venv restored" in (repo / ".reqdrive/runs/wrong/progress.txt").read_text()
    )
    body = (repo / ".reqdrive/runs/wrong/pr.md").read_text()
    assert "**Draft**: 1 of 1 stories did not pass: US-001 (failed)." in body
    still = project.failing_tests[0]
    assert f"- `{still}` (owned): failed → failed — still fails" in body
    assert f"- `{still}`: US-001 owns it and ended failed" in body
