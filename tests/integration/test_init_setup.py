"""`reqdrive init` suggests the `setup` that installs the project, commented out, as valid YAML."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.e2e.test_run_cli import run_cli
from tests.integration.test_repo_cli import checkout
from worker.model.repo_config import RepoConfig, parse_repo_config

INIT = [sys.executable, "-m", "bot.cli", "init"]
CONFIG = ".github/reqdrive.yml"
PYPROJECT = (
    '[project]\nname = "calc"\nversion = "1"\n[project.optional-dependencies]\ntest = ["pytest"]\n'
)


def init_with_setup(repo: Path) -> tuple[RepoConfig, RepoConfig, str]:
    """The config as init wrote it, the same with its setup line uncommented, and stdout."""
    done = run_cli(repo, INIT)
    assert done.returncode == 0, done.stderr
    text = (repo / CONFIG).read_text()
    uncommented = text.replace("# setup: ", "setup: ")
    return parse_repo_config(text, CONFIG), parse_repo_config(uncommented, CONFIG), done.stdout


def test_a_python_project_with_a_test_extra_gets_a_venv_with_it_installed(tmp_path: Path) -> None:
    repo = checkout(tmp_path, {"pyproject.toml": PYPROJECT, "src/calc/__init__.py": ""})
    written, uncommented, out = init_with_setup(repo)

    assert written.setup is None  # a suggestion: installing is the maintainer's call
    command = "python3 -m venv .venv && .venv/bin/pip install -e '.[test]'"
    assert uncommented.setup == command
    assert f"suggested setup, commented out in {CONFIG}: {command}" in out


def test_a_node_project_with_a_lockfile_gets_npm_ci(tmp_path: Path) -> None:
    package = '{"name": "x", "scripts": {"test": "node --test"}}'
    repo = checkout(tmp_path, {"package.json": package, "package-lock.json": "{}"})
    _, uncommented, _ = init_with_setup(repo)
    assert uncommented.setup == "npm ci"


def test_a_node_project_without_a_lockfile_gets_npm_install_and_why_nothing_is_cached(
    tmp_path: Path,
) -> None:
    # npm ci refuses to run without package-lock.json (a published tarball has none).
    package = '{"name": "x", "scripts": {"test": "mocha"}, "devDependencies": {"mocha": "5"}}'
    repo = checkout(tmp_path, {"package.json": package})
    _, uncommented, out = init_with_setup(repo)
    assert uncommented.setup == "npm install --no-audit --no-fund"
    assert "npm ci" not in out.split("suggested setup")[0].replace("use npm ci", "")
    assert "There is no package-lock.json" in (repo / CONFIG).read_text()


def test_a_node_project_without_dependencies_gets_no_setup(tmp_path: Path) -> None:
    repo = checkout(tmp_path, {"package.json": '{"scripts": {"test": "node --test"}}'})
    _, uncommented, _ = init_with_setup(repo)
    assert uncommented.setup is None


def test_a_project_without_a_known_install_gets_no_setup(tmp_path: Path) -> None:
    repo = checkout(tmp_path, {"pytest.ini": "[pytest]\n", "tests/test_x.py": ""})
    _, uncommented, out = init_with_setup(repo)
    assert uncommented.setup is None and "suggested setup" not in out


def test_a_python_project_without_a_test_extra_gets_pytest_in_its_venv(tmp_path: Path) -> None:
    # six as released: a setup.py, pytest named only in tests_require and setup.cfg. The
    # venv `pip install -e .` makes would have no test runner for the checks.
    setup_py = "from setuptools import setup\nsetup(name='six', tests_require=['pytest'])\n"
    repo = checkout(
        tmp_path,
        {
            "setup.py": setup_py,
            "setup.cfg": "[tool:pytest]\nminversion = 2.2.0\n",
            "six.py": "",
            "test_six.py": "def test_six():\n    pass\n",
        },
    )
    _written, uncommented, said = init_with_setup(repo)

    assert uncommented.setup == "python3 -m venv .venv && .venv/bin/pip install -e . pytest"
    assert f"suggested setup, commented out in {CONFIG}: {uncommented.setup}" in said
    assert "start the tests with .venv/bin/python -m pytest" in (repo / CONFIG).read_text()


def test_a_pnpm_project_gets_pnpm_at_the_version_it_names_never_npm_install(
    tmp_path: Path,
) -> None:
    # npm install would ignore pnpm-lock.yaml and resolve the tree anew.
    package = (
        '{"packageManager": "pnpm@9.1.0+sha256.abc", "scripts": {"test": "mocha"}, '
        '"devDependencies": {"mocha": "5"}}'
    )
    repo = checkout(
        tmp_path, {"package.json": package, "pnpm-lock.yaml": "lockfileVersion: '9.0'\n"}
    )
    _, uncommented, out = init_with_setup(repo)
    assert uncommented.setup == "npx --yes pnpm@9.1.0 install --frozen-lockfile"
    assert "pnpm install installs them" in out and " npm install" not in out


def test_a_yarn_classic_project_gets_yarn_1_and_yarn_2_none(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    classic = checkout(
        tmp_path / "a", {"package.json": '{"devDependencies": {"mocha": "5"}}', "yarn.lock": ""}
    )
    _, uncommented, _ = init_with_setup(classic)
    assert uncommented.setup == "npx --yes yarn@1 install --frozen-lockfile"
    berry = checkout(
        tmp_path / "b", {"package.json": '{"packageManager": "yarn@4.1.0"}', "yarn.lock": ""}
    )
    _, uncommented, out = init_with_setup(berry)
    assert uncommented.setup is None and " npm install" not in out
