"""`reqdrive init` as a real process reading real projects: the test runner and how it is
installed, a src/ layout, the runner's own JUnit option, monorepo folders; the commands it
writes are run as the worker would run them (`bash -c` in the checkout)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_run_cli import run_cli
from tests.integration.test_repo_cli import checkout
from tests.support.pytest_command import PLAIN_PYTEST, QUIET_PLUGINS
from worker.model.repo_config import RepoConfig, parse_repo_config

INIT = [sys.executable, "-m", "bot.cli", "init"]
UNITTEST_SUITE = (
    "import unittest\n\nimport calc\n\n\nclass CalcTest(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(calc.add(1, 2), 3)\n"
)
CALC = "def add(a, b):\n    return a + b\n"


def init(repo: Path) -> tuple[RepoConfig, str]:
    done = run_cli(repo, INIT)
    assert done.returncode == 0, done.stderr
    text = (repo / ".github/reqdrive.yml").read_text()
    return parse_repo_config(text, ".github/reqdrive.yml"), done.stdout


def run_gate(repo: Path, command: str) -> subprocess.CompletedProcess[str]:
    """The command as a gate runs it, with this interpreter's folder first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REQDRIVE_", "PYTHON"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run(
        ["bash", "-c", command], cwd=repo, env=env, capture_output=True, text=True, timeout=120
    )


def test_a_unittest_suite_without_pytest_gets_unittest_and_the_line_to_install_pytest(
    tmp_path: Path,
) -> None:
    repo = checkout(
        tmp_path,
        {"setup.py": "", "calc.py": CALC, "tests/test_calc.py": UNITTEST_SUITE},
    )
    config, out = init(repo)
    assert config.test_command == "python -m unittest discover -s tests"
    assert "unittest gives no per-test results" in out and "pip install pytest" in out
    ran = run_gate(repo, config.test_command)
    assert ran.returncode == 0 and "Ran 1 test" in ran.stderr  # tests/ has no __init__.py


def test_a_unittest_suite_that_declares_pytest_gets_pytest(tmp_path: Path) -> None:
    repo = checkout(
        tmp_path,
        {
            "setup.py": "",
            "requirements-dev.txt": "pytest>=8\n",
            "calc.py": CALC,
            "tests/test_calc.py": UNITTEST_SUITE,
        },
    )
    config, out = init(repo)
    assert config.test_command == "python -m pytest -q"
    assert "pip install pytest" not in out


def test_pytest_not_declared_is_said_with_its_install_line(tmp_path: Path) -> None:
    repo = checkout(
        tmp_path,
        {"pyproject.toml": "[project]\nname = 'x'\n", "tests/test_x.py": "def test_x(): pass\n"},
    )
    config, out = init(repo)
    assert config.test_command == "python -m pytest -q"
    assert "pytest must be installed where the checks run" in out
    assert "pip install pytest" in out


def test_a_src_layout_runs_the_checks_on_the_worktrees_code(tmp_path: Path) -> None:
    pyproject = "[project]\nname = 'calc'\n\n[project.optional-dependencies]\ntest = ['pytest']\n"
    repo = checkout(
        tmp_path,
        {
            "pyproject.toml": pyproject,
            "src/calc/__init__.py": CALC,
            "tests/test_calc.py": "import calc\n\n\ndef test_add():\n    assert calc.add(1, 2)\n",
        },
    )
    config, out = init(repo)
    assert config.test_command == "PYTHONPATH=src python -m pytest -q"
    assert "a src/ layout (calc)" in out and "pip install -e ." in out
    assert run_gate(repo, f"{config.test_command} {QUIET_PLUGINS}").returncode == 0
    plain = run_gate(repo, PLAIN_PYTEST)
    assert "No module named 'calc'" in plain.stdout  # what the prefix is for


def node_project(tmp_path: Path, package: dict[str, object]) -> Path:
    return checkout(tmp_path, {"package.json": json.dumps(package)})


def test_vitest_gets_its_built_in_junit_reporter_not_jest_junit(tmp_path: Path) -> None:
    repo = node_project(
        tmp_path, {"scripts": {"test": "vitest"}, "devDependencies": {"vitest": "^1.6.0"}}
    )
    config, out = init(repo)
    assert [(g.command, g.junit) for g in config.gates] == [
        (
            "npx --no-install vitest run --reporter=default --reporter=junit "
            "--outputFile=reqdrive-junit.xml",
            "reqdrive-junit.xml",
        )
    ]
    assert "jest-junit" not in (repo / ".github/reqdrive.yml").read_text() + out
    assert "npm install installs them" in out  # no package-lock.json, so not npm ci


def test_jest_without_jest_junit_runs_jest_itself_for_the_worker_s_own_report(
    tmp_path: Path,
) -> None:
    repo = node_project(tmp_path, {"scripts": {"test": "jest"}, "devDependencies": {"jest": "29"}})
    config, out = init(repo)
    assert config.test_command == "npx --no-install jest"
    assert "jest-junit" not in out


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_node_test_writes_junit_with_its_own_reporter(tmp_path: Path) -> None:
    repo = node_project(tmp_path, {"scripts": {"test": "node --test test/"}})
    (repo / "test").mkdir()
    (repo / "test/add.test.js").write_text(
        "const test = require('node:test');\nconst assert = require('node:assert');\n"
        "test('adds', () => assert.strictEqual(1 + 2, 3));\n"
    )
    config, _ = init(repo)
    [tests] = config.gates
    assert tests.junit == "reqdrive-junit.xml"
    assert run_gate(repo, tests.command).returncode == 0
    assert 'name="adds"' in (repo / "reqdrive-junit.xml").read_text()


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_a_chained_test_script_is_read_through_npm_run_to_its_runner(tmp_path: Path) -> None:
    # fastify's packages: `npm test` runs `npm run test:unit && npm run test:typescript`,
    # test:unit being `c8 --100 node --test`; `npm test` itself gives no per-test results.
    scripts = {
        "test": "npm run test:unit && npm run test:typescript",
        "test:unit": "c8 --100 node --test",
        "test:typescript": "tsd",
    }
    repo = node_project(tmp_path, {"scripts": scripts, "devDependencies": {"c8": "10"}})
    (repo / "test").mkdir()
    (repo / "test/add.test.js").write_text(
        "const test = require('node:test');\nconst assert = require('node:assert');\n"
        "test('adds', () => assert.strictEqual(1 + 2, 3));\n"
    )
    config, out = init(repo)
    [tests] = config.gates
    assert tests.command.startswith("node --test --test-reporter=spec")
    assert "c8 (coverage) is left out" in out
    assert "npm test also runs tsd: add a gate" in out
    assert "npm install installs them" in out  # no package-lock.json: npm ci would refuse
    assert run_gate(repo, tests.command).returncode == 0
    assert 'name="adds"' in (repo / "reqdrive-junit.xml").read_text()


def test_mocha_gets_its_built_in_xunit_reporter_in_place_of_its_own(tmp_path: Path) -> None:
    repo = node_project(tmp_path, {"scripts": {"test": "mocha -R nyan --check-leaks test/*.js"}})
    config, _ = init(repo)
    assert [(g.command, g.junit) for g in config.gates] == [
        (
            "npx --no-install mocha --check-leaks test/*.js --reporter xunit "
            "--reporter-options output=reqdrive-junit.xml",
            "reqdrive-junit.xml",
        )
    ]


def test_monorepo_folders_are_listed_with_a_note(tmp_path: Path) -> None:
    (tmp_path / "node").mkdir()
    (tmp_path / "python").mkdir()
    repo = node_project(
        tmp_path / "node",
        {"workspaces": ["packages/*"], "scripts": {"test": "npm test --workspaces"}},
    )
    _, out = init(repo)
    assert "a monorepo (package.json workspaces: packages/*)" in out
    python = checkout(
        tmp_path / "python",
        {
            "pyproject.toml": "[tool.pytest.ini_options]\n",
            "libs/a/pyproject.toml": "[project]\nname = 'a'\n",
            "libs/b/pyproject.toml": "[project]\nname = 'b'\n",
        },
    )
    _, out = init(python)
    assert "a monorepo (pyproject.toml files: libs/a, libs/b)" in out
    assert "add a gate per package" in out


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_init_in_a_monorepos_package_folder_reads_that_package(tmp_path: Path) -> None:
    # The top's `npm test --workspaces` gives no per-test results; the package's node --test
    # does, run in its folder (the worker runs every check at the top of the worktree).
    repo = checkout(
        tmp_path,
        {
            "package.json": json.dumps(
                {"workspaces": ["packages/*"], "scripts": {"test": "npm test --workspaces"}}
            ),
            "packages/calc/package.json": json.dumps({"scripts": {"test": "node --test"}}),
            "packages/calc/test/add.test.js": (
                "const test = require('node:test');\nconst assert = require('node:assert');\n"
                "test('adds', () => assert.strictEqual(1 + 2, 3));\n"
            ),
        },
    )
    done = run_cli(repo / "packages" / "calc" / "test", INIT)  # anywhere inside the package
    assert done.returncode == 0, done.stderr
    config = parse_repo_config((repo / ".github/reqdrive.yml").read_text(), "reqdrive.yml")
    [tests] = config.gates
    assert tests.command.startswith("cd packages/calc && node --test ")
    assert tests.junit == "packages/calc/reqdrive-junit.xml"
    assert "init ran in packages/calc, a package of this repository" in done.stdout
    assert (repo / "docs/requirements/REQ-001-example.md").is_file()  # at the top
    assert run_gate(repo, tests.command).returncode == 0
    assert 'name="adds"' in (repo / tests.junit).read_text()


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_init_at_the_top_of_a_workspaces_monorepo_gives_each_package_a_gate(
    tmp_path: Path,
) -> None:
    add_test = (
        "const test = require('node:test');\nconst assert = require('node:assert');\n"
        "test('adds', () => assert.strictEqual(1 + 2, 3));\n"
    )
    repo = checkout(
        tmp_path,
        {
            "package.json": json.dumps(
                {"workspaces": ["packages/*"], "scripts": {"test": "npm test --workspaces"}}
            ),
            "packages/calc/package.json": json.dumps({"scripts": {"test": "node --test"}}),
            "packages/calc/test/add.test.js": add_test,
            "packages/web/package.json": json.dumps({"scripts": {"test": "vitest"}}),
            "packages/docs/package.json": json.dumps({"scripts": {"test": "make check"}}),
        },
    )
    config, out = init(repo)
    assert config.test_command is None  # `npm test --workspaces` gives no per-test results
    assert [(g.name, g.command.split(" && ")[0], g.junit) for g in config.gates] == [
        ("calc", "cd packages/calc", "packages/calc/reqdrive-junit.xml"),
        ("web", "cd packages/web", "packages/web/reqdrive-junit.xml"),
    ]
    assert "each package's tests are a gate of their own" in out
    assert "reports no per-test results" not in out
    calc = config.gates[0]
    assert run_gate(repo, calc.command).returncode == 0
    assert 'name="adds"' in (repo / str(calc.junit)).read_text()


def test_the_requirements_folder_in_use_is_found_outside_dependency_folders(
    tmp_path: Path,
) -> None:
    repo = checkout(
        tmp_path,
        {
            "setup.py": "",
            "node_modules/a/REQ-1-dep.md": "# a dependency's file\n",
            "specs/REQ-003-export.md": "# Export\n",
        },
    )
    config, out = init(repo)
    assert config.requirements_dir == "specs"
    assert "wrote specs/REQ-001-example.md" in out


def test_notes_in_the_config_keep_each_option_on_one_line(tmp_path: Path) -> None:
    repo = node_project(tmp_path, {"scripts": {"test": "vitest"}})
    init(repo)
    comments = " ".join(
        line[2:]
        for line in (repo / ".github/reqdrive.yml").read_text().splitlines()
        if line.startswith("# ")
    )
    assert "npx --no-install never downloads" in comments
