"""README's "Try it on your repository": its commands, read from the README and run as written
in a real Python checkout, with the scripted shell agent the README defines."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def readme_section(title: str) -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split(title, 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.DOTALL)


def toy_agent_block() -> str:
    """The part of the local-run example that writes the scripted agent."""
    block = next(b for b in sh_blocks((ROOT / "README.md").read_text()) if "toy-agent.sh <<" in b)
    return block.split("REQDRIVE=", 1)[0]


def test_the_try_it_section_runs_as_written(tmp_path: Path) -> None:
    commands = [
        line
        for line in sh_blocks(readme_section("### Try it on your repository"))[0].splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert [c.split()[1] for c in commands if c.startswith("reqdrive ")] == [
        "init", "validate", "plan", "run", "status", "logs",
    ]  # fmt: skip
    repo = tmp_path / "project"
    (repo / "tests").mkdir(parents=True)
    (repo / "pyproject.toml").write_text("[project]\nname = 'project'\nversion = '0'\n")
    (repo / "tests/test_project.py").write_text("def test_project():\n    assert True\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REQDRIVE_", "REDIS_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # `reqdrive`, python
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    for setup in ("git init -q -b main", "git add -A", "git commit -qm 'the project'"):
        subprocess.run(setup, shell=True, cwd=repo, env=env, check=True)  # noqa: S602
    subprocess.run(toy_agent_block(), shell=True, cwd=tmp_path, env=env, check=True)  # noqa: S602

    outputs = {}
    for command in commands:
        done = subprocess.run(  # noqa: S602 - the README's own shell line
            command, shell=True, cwd=repo, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        outputs[command.split()[1]] = done.stdout

    assert "wrote .github/reqdrive.yml" in outputs["init"]
    assert outputs["validate"].startswith("ok: .github/reqdrive.yml, 1 requirement(s)")
    assert "US-001 (priority 1) Say hello" in outputs["plan"]
    assert "done: 1 story" in outputs["run"]
    assert "req-001-example: ready; 1/1 stories passed, 1 attempt" in outputs["status"]
    assert "plan: 1 story US-001" in outputs["logs"]
    branch = subprocess.run(
        ["git", "log", "--format=%s", "reqdrive/req-001-example"],
        cwd=repo, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert branch.splitlines()[0] == "feat: [US-001] - Say hello"
    assert (repo / ".reqdrive/runs/req-001-example/pr.md").is_file()


def test_the_local_run_example_runs_as_written_and_is_ready_for_review(tmp_path: Path) -> None:
    # The check is pytest, from the demo's own setup: without per-test results the story would
    # be "unverified" and the run a draft.
    block = next(b for b in sh_blocks((ROOT / "README.md").read_text()) if "toy-agent.sh <<" in b)
    reqdrive = Path(sys.executable).parent / "reqdrive"
    script = block.replace("REQDRIVE=$PWD/.venv/bin/reqdrive", f"REQDRIVE={reqdrive}").replace(
        "/tmp/demo", str(tmp_path / "demo")
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REQDRIVE_", "REDIS_"))}
    done = subprocess.run(
        ["bash", "-euc", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "done: 1 story: 1 passed;" in done.stdout and "ready for review" in done.stdout
    assert (tmp_path / "demo/.reqdrive/runs/add-a-hello-txt-that-says-hello/pr.md").is_file()
