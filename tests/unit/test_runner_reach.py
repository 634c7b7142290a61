"""The story's code lines that name its test runner's machinery, read from a real git diff."""

from __future__ import annotations

import subprocess
from pathlib import Path

from worker.verdict.runner_reach import (
    installed_modules,
    reach_note,
    runner_reach,
    runner_requirements,
    shadowing,
)
from worker.verdict.test_side import TestSide


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def change(tmp_path: Path, files: dict[str, str]) -> tuple[Path, str, str]:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    pre = git(repo, "rev-parse", "HEAD")
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "story")
    return repo, pre, git(repo, "rev-parse", "HEAD")


def test_honest_code_in_any_language_is_not_flagged(tmp_path: Path) -> None:
    repo, pre, commit = change(
        tmp_path,
        {
            "calc.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n",
            "web/sum.ts": "export const sum = (a: number, b: number) => a + b;\n",
            "pkg/sum.go": "package pkg\n\nfunc Sum(a, b int) int { return a + b }\n",
            # Prose no check runs may name anything: docs of the variables reqdrive sets.
            "docs/ci.md": "Set `REQDRIVE_SANDBOX=on` and read `pytest-results.jsonl`.\n",
            "notes.txt": "REQDRIVE_RESULTS=/tmp/r PYTEST_ADDOPTS=--junitxml=x\n",
        },
    )
    assert runner_reach(repo, pre, commit, TestSide.of(None)) == []


def test_code_naming_the_runner_is_flagged_by_file_line_and_kind(tmp_path: Path) -> None:
    repo, pre, commit = change(
        tmp_path,
        {
            "calc.py": "import sys\n\nif '_pytest' in sys.modules:\n    import atexit\n",
            "web/sum.ts": "if (process.env.VITEST) process.exit(0);\n",
            "pkg/init.go": 'package pkg\n\nimport "os"\n\nfunc init() { os.Exit(0) }\n',
            "tools/forge.sh": "sed -i s/failed/passed/ $REQDRIVE_RESULTS\n",
            # The test side is the tests' own business: it is frozen, not read here.
            "tests/conftest.py": "import pytest\n",
        },
    )
    found = runner_reach(repo, pre, commit, TestSide.of(None))
    assert found == [
        "calc.py:3 names pytest's machinery",
        "calc.py:4 acts as the test process exits",
        "pkg/init.go:5 ends the process",
        "tools/forge.sh:1 names reqdrive's reporter or its reports",
        "web/sum.ts:1 names its test runner",
        "web/sum.ts:1 acts as the test process exits",
    ]
    assert "a person reads it before it counts" in reach_note(found)


def test_a_new_module_that_shadows_the_runner_the_stdlib_or_an_installed_one_is_flagged(
    tmp_path: Path,
) -> None:
    repo, pre, commit = change(
        tmp_path,
        {
            "pytest.py": "",
            "src/queue.py": "",
            "deepdiff/__init__.py": "",
            "feature.py": "",
            "src/calc/types.py": "",
            "tests/json.py": "",  # the test side: frozen, not read here
        },
    )
    found = shadowing(repo, pre, commit, TestSide.of(None), frozenset({"deepdiff"}))
    assert found == [
        "deepdiff/__init__.py shadows the module deepdiff the checks import from elsewhere",
        "pytest.py shadows the module pytest the checks import from elsewhere",
        "src/queue.py shadows the module queue the checks import from elsewhere",
    ]


def test_the_installed_modules_are_read_from_the_setups_site_packages(tmp_path: Path) -> None:
    site = tmp_path / ".venv" / "lib" / "python3.11" / "site-packages"
    (site / "deepdiff").mkdir(parents=True)
    (site / "six.py").write_text("")
    (site / "deepdiff-6.0.dist-info").mkdir()
    assert installed_modules(tmp_path, [".venv/"]) == {"deepdiff", "six"}


def test_files_git_quotes_are_read_under_their_own_names(tmp_path: Path) -> None:
    repo, pre, commit = change(
        tmp_path,
        {
            "calc_\u00fc.py": "import _pytest.python\n",
            'we"ird\tname.py': "from pytest import hookimpl\n",
            "tests/hook.py": "def pytest_pyfunc_call(pyfuncitem):\n    return True\n",
        },
    )
    found = runner_reach(repo, pre, commit, TestSide(globs=()))
    assert sorted(found) == [
        "calc_\u00fc.py:1 names pytest's machinery",
        "tests/hook.py:1 names pytest's machinery",  # a hook by name
        "we\"ird\tname.py:1 names pytest's machinery",
    ]


def test_what_pytest_requires_and_imports_at_its_start_cannot_be_shadowed(
    tmp_path: Path,
) -> None:
    assert {"iniconfig", "pluggy", "packaging"} <= runner_requirements()
    repo, pre, commit = change(tmp_path, {"iniconfig.py": "", "src/packaging/__init__.py": ""})
    found = shadowing(repo, pre, commit, TestSide(globs=()), frozenset())
    assert found == [
        "iniconfig.py shadows the module iniconfig the checks import from elsewhere",
        "src/packaging/__init__.py shadows the module packaging the checks import from elsewhere",
    ]


def test_a_plugin_named_in_the_environment_is_reaching_into_the_runner(tmp_path: Path) -> None:
    repo, pre, commit = change(
        tmp_path, {"calc.py": "import os\nos.environ['PYTEST_PLUGINS'] = 'x'\n"}
    )
    assert runner_reach(repo, pre, commit, TestSide(globs=())) == [
        "calc.py:2 names reqdrive's reporter or its reports"
    ]
