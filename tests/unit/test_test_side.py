"""The test side: which files define or configure tests, and a mixed file's test part."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from worker.local.init_repo import detect, render_config
from worker.model.repo_config import RepoConfig, StoryChecks, TestsMode, parse_repo_config
from worker.verdict.test_side import (
    TestSide,
    Unsplittable,
    default_test_paths,
    detect_ecosystems,
    is_mixed,
    splice,
)
from worker.verdict.test_side import test_modules_only as modules_only
from worker.verdict.test_side import test_part as settings_part

DEFAULTS = TestSide.of(None)


@pytest.mark.parametrize(
    "path",
    [
        "tests/test_api.py",
        "pkg/sub/test_x.py",
        "src/app/models_test.py",
        "conftest.py",
        "deep/er/conftest.py",
        "tests/helpers.py",
        "tests/pytest.ini",
        ".pytest.toml",
        "pytest.toml",
        ".pytest.ini",
        "sitecustomize.py",
        "lib/usercustomize.py",
        ".venv/lib/python3.12/site-packages/zz.pth",
        "web/src/app.test.ts",
        "web/src/__tests__/app.tsx",
        "jest.config.js",
        "vitest.config.mts",
        ".mocharc.yml",
        "pkg/foo_test.go",
        "pkg/testdata/golden.txt",
        ".config/nextest.toml",
        "noxfile.py",
        "forge-1.0.dist-info/entry_points.txt",
        "src/calc.egg-info/entry_points.txt",
        "lib/entry_points.txt",
        "vite.config.ts",
        "web/vitest.workspace.json",
        "babel.config.js",
        ".babelrc",
        "playwright.config.ts",
    ],
)
def test_the_default_test_side_covers_what_defines_or_configures_tests(path: str) -> None:
    assert DEFAULTS.covers(path)


@pytest.mark.parametrize("path", ["calc.py", "src/app/models.py", "README.md", "pyproject.toml"])
def test_code_is_not_on_the_test_side(path: str) -> None:
    assert not DEFAULTS.covers(path)


def test_configured_test_paths_replace_the_defaults_but_never_the_always_guarded_names() -> None:
    side = TestSide.of(["spec/**"])
    assert side.covers("spec/a_spec.rb") and not side.covers("tests/test_api.py")
    assert side.covers("conftest.py") and side.covers("x/sitecustomize.py")


def test_a_link_named_like_a_test_folder_is_on_the_test_side() -> None:
    assert DEFAULTS.reaches("tests") and DEFAULTS.reaches("pkg/tests")
    assert not DEFAULTS.reaches("src")


def test_the_config_keys_parse_and_refuse_a_wrong_mode() -> None:
    config = parse_repo_config("testPaths: ['spec/**']\ntests: together\n", "x.yml")
    assert config.test_paths == ["spec/**"] and config.tests is TestsMode.TOGETHER
    assert RepoConfig().tests is TestsMode.FIRST and RepoConfig().test_paths is None
    with pytest.raises(Exception, match="tests"):
        parse_repo_config("tests: later\n", "x.yml")


PYPROJECT = """\
[project]
name = "calc"
dependencies = []

[tool.pytest.ini_options]
addopts = "-q"

[tool.ruff]
line-length = 100
"""


def test_pyproject_keeps_its_new_dependency_and_loses_its_new_pytest_options() -> None:
    agent = PYPROJECT.replace("[]", '["attrs"]').replace('"-q"', '"-q -p no:warnings"')
    merged = splice("pyproject.toml", tests_from=PYPROJECT, rest_from=agent)
    assert merged is not None
    parsed = tomllib.loads(merged)
    assert parsed["project"]["dependencies"] == ["attrs"]
    assert parsed["tool"]["pytest"]["ini_options"]["addopts"] == "-q"
    assert parsed["tool"]["ruff"]["line-length"] == 100


def test_a_tests_call_keeps_its_pytest_options_and_loses_a_dependency() -> None:
    agent = PYPROJECT.replace("[]", '["attrs"]').replace('"-q"', '"-q --strict-markers"')
    merged = splice("pyproject.toml", tests_from=agent, rest_from=PYPROJECT)
    assert merged is not None
    parsed = tomllib.loads(merged)
    assert parsed["project"]["dependencies"] == []
    assert parsed["tool"]["pytest"]["ini_options"]["addopts"] == "-q --strict-markers"


def test_pytest_options_written_as_dotted_keys_cannot_be_split_line_by_line() -> None:
    agent = (
        PYPROJECT.replace("[]", '["attrs"]') + "\n[tool]\npytest.ini_options.xfail_strict = true\n"
    )
    agent = agent.replace("[tool.ruff]", "[tool.ruff2]")
    with pytest.raises(Unsplittable):
        splice("pyproject.toml", tests_from=PYPROJECT, rest_from=agent)


def test_setup_cfg_and_tox_ini_split_on_their_test_sections() -> None:
    base = "[metadata]\nname = calc\n\n[tool:pytest]\naddopts = -q\n"
    agent = "[metadata]\nname = calc2\n\n[tool:pytest]\naddopts = -q --deselect t.py::x\n"
    merged = splice("setup.cfg", tests_from=base, rest_from=agent)
    assert merged is not None and "name = calc2" in merged and "--deselect" not in merged
    assert settings_part("tox.ini", "[tox]\nenvlist = py3\n") == {"tox": {"envlist": "py3"}}


def test_package_json_keeps_dependencies_and_loses_its_test_script_change() -> None:
    base = {"name": "a", "scripts": {"test": "vitest run"}, "dependencies": {}}
    agent = {**base, "scripts": {"test": "exit 0"}, "dependencies": {"left-pad": "1"}}
    merged = splice("package.json", tests_from=json.dumps(base), rest_from=json.dumps(agent))
    assert merged is not None
    assert json.loads(merged) == {**base, "dependencies": {"left-pad": "1"}}
    assert is_mixed("web/package.json") and not is_mixed("calc.py")


def test_ecosystems_are_detected_and_init_writes_their_test_paths_commented(tmp_path: Path) -> None:
    assert detect_ecosystems(["go.mod", "web/package.json", "x.py"]) == [
        "python",
        "javascript",
        "go",
    ]
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    written = render_config(detect(tmp_path))
    assert "# testPaths:" in written and '#   - "**/test_*.py"' in written
    assert "# tests: first" in written
    for glob in default_test_paths(["python"]):
        assert f'#   - "{glob}"' in written
    # A pytest project gets checks on the tests a change reaches.
    config = parse_repo_config(written, "r.yml")
    assert config.checks is StoryChecks.AFFECTED
    (tmp_path / "pyproject.toml").unlink()
    (tmp_path / "go.mod").write_text("module x\n")
    assert "checks:" not in render_config(detect(tmp_path))


@pytest.mark.parametrize(
    ("changed", "expected"),
    [
        (["tests/test_api.py"], ["tests/test_api.py"]),
        (["pkg/api_test.py", "src/add.test.js", "ui/x.spec.tsx"], None),
        (["tests/test_api.py", "tests/conftest.py"], []),
        (["tests/test_api.py", "tests/helpers.py"], []),
        (["tests/test_api.py", "pyproject.toml"], []),
        (["jest.config.test.js"], []),
        (["tests/test_gone.py"], []),  # deleted: not a plain file at the commit
        (["calc_test.go"], []),  # go selects by name, not by file
        ([], []),
    ],
)
def test_only_new_or_changed_test_modules_are_proven_alone(
    tmp_path: Path, changed: list[str], expected: list[str] | None
) -> None:
    for path in changed:
        if "gone" not in path:
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_text("x\n")
    assert modules_only(changed, tmp_path) == (changed if expected is None else expected)


def test_a_test_module_that_is_a_link_is_not_proven_alone(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "real.py").write_text("x\n")
    (tmp_path / "tests" / "test_api.py").symlink_to(tmp_path / "real.py")
    assert modules_only(["tests/test_api.py"], tmp_path) == []


ENTRY_POINTS = """\
[project]
name = "calc"

[project.entry-points.console_scripts]
calc = "calc:main"
"""


def test_a_pytest11_entry_point_in_pyproject_is_the_test_part() -> None:
    agent = ENTRY_POINTS + '\n[project.entry-points.pytest11]\nforge = "forging_plugin"\n'
    agent = agent.replace('"calc:main"', '"calc:cli"')
    assert settings_part("pyproject.toml", agent) != settings_part("pyproject.toml", ENTRY_POINTS)
    merged = splice("pyproject.toml", tests_from=ENTRY_POINTS, rest_from=agent)
    assert merged is not None
    points = tomllib.loads(merged)["project"]["entry-points"]
    assert points == {"console_scripts": {"calc": "calc:cli"}}


SETUP_CFG = (
    "[metadata]\nname = calc\n\n[options.entry_points]\nconsole_scripts =\n    c = calc:main\n"
)


def test_a_pytest11_entry_point_in_setup_cfg_is_the_test_part() -> None:
    agent = SETUP_CFG + "pytest11 =\n    forge = forging_plugin\n"
    assert settings_part("setup.cfg", agent) != settings_part("setup.cfg", SETUP_CFG)
    assert splice("setup.cfg", tests_from=SETUP_CFG, rest_from=agent) == SETUP_CFG
    # With a code change in the same section it cannot be cut line by line: the file stays
    # as it was (keep_side puts it back whole).
    both = agent.replace("calc:main", "calc:cli")
    with pytest.raises(Unsplittable):
        splice("setup.cfg", tests_from=SETUP_CFG, rest_from=both)
