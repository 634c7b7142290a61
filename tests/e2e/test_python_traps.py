"""Python set-ups that misled a run before, through the real CLI: `init` → `validate` → `run`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e
SUPPORT = Path(__file__).resolve().parents[1] / "support"
REQDRIVE = Path(sys.executable).parent / "reqdrive"
REQUIREMENT = "docs/requirements/REQ-001-value.md"
BUGGY = "def value():\n    return 0\n"
FIXED = "def value():\n    return 1\n"


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def reqdrive(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REQDRIVE), *args], cwd=repo, env=env, capture_output=True, text=True, timeout=300
    )


def user_venv(folder: Path, checkout: Path) -> Path:
    """The developer's own venv with the project installed editable from their checkout, as
    `pip install -e .` leaves it: a .pth naming the checkout's src/ (and this suite's pytest)."""
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(folder)], check=True)
    site = Path(sysconfig.get_paths(vars={"base": str(folder)})["purelib"])
    (site / "__editable__.demo.pth").write_text(f"{checkout / 'src'}\n")
    (site / "suite.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return folder


@pytest.mark.parametrize("sandbox", ["off", "on"])
def test_a_src_project_installed_editable_from_the_checkout_is_judged_on_the_worktree(
    tmp_path: Path, sandbox: str
) -> None:
    if sandbox == "on" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    repo = tmp_path / "project"
    files = {
        "pyproject.toml": "[project]\nname = 'demo'\nversion = '0.1'\n"
        "\n[project.optional-dependencies]\ntest = ['pytest']\n",
        "src/demo/__init__.py": BUGGY,
        "tests/test_demo.py": "import demo\n\n\ndef test_value():\n    assert demo.value() == 1\n",
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "demo")
    venv = user_venv(tmp_path / "user-venv", repo)
    agent_io = tmp_path / "agent-io"
    agent_io.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REQDRIVE_", "REDIS_"))}
    # The agent's interpreter and this suite's pytest; the user's venv is found by reqdrive.
    shown = [str(SUPPORT), str(agent_io), sys.prefix, sys.base_prefix]
    env["REQDRIVE_SANDBOX_READONLY"] = os.pathsep.join(shown)

    init = reqdrive(repo, env, "init")
    assert "a src/ layout (demo)" in init.stdout, init.stdout + init.stderr
    config = yaml.safe_load((repo / ".github/reqdrive.yml").read_text())
    assert config["testCommand"] == "PYTHONPATH=src python -m pytest -q"
    config.pop("lintCommand", None)
    (repo / ".github/reqdrive.yml").write_text(yaml.safe_dump(config))
    (repo / "docs/requirements/REQ-001-example.md").unlink()
    (repo / REQUIREMENT).write_text("# REQ-001: value is 1\n\n## Done when\n\n- value() is 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "reqdrive: configuration")
    assert reqdrive(repo, env, "validate").returncode == 0

    story = {
        "id": "US-001",
        "title": "value is 1",
        "acceptanceCriteria": ["value() is 1"],
        "priority": 1,
        "tests": ["tests.test_demo::test_value"],
    }
    scenario = agent_io / "scenario.json"
    scenario.write_text(
        json.dumps(
            {
                "plan": [{"prd": {"userStories": [story]}}],
                "stories": {"US-001": [{"write": {"src/demo/__init__.py": FIXED}}]},
            }
        )
    )
    agent = (
        f"{sys.executable} {SUPPORT / 'scripted_agent.py'} --scenario {scenario} "
        "--prompt {prompt_file} --run-dir {run_dir}"
    )
    done = reqdrive(
        repo, env, "run", REQUIREMENT, "--sandbox", sandbox, "--agent", "command",
        "--agent-command", agent, "--gate-path", f"{venv / 'bin'}:/usr/bin:/bin",
    )  # fmt: skip

    # The checks imported the worktree's src/, not the checkout the venv names (still 0).
    assert done.returncode == 0, done.stdout + done.stderr
    body = (repo / ".reqdrive/runs/req-001-value/pr.md").read_text()
    assert "**Ready for review**" in body
    assert "- `tests.test_demo::test_value` (owned): failed → passed" in body
    assert (repo / "src/demo/__init__.py").read_text() == BUGGY  # the checkout is untouched
