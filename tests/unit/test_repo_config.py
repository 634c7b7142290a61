"""Repository configuration: defaults, camelCase keys, errors that name the key, base commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from worker.exceptions import RepoConfigError
from worker.git.at_commit import read_repo_config
from worker.model.repo_config import (
    GatesMode,
    RepoConfig,
    check_repo_config,
    matches_any,
    parse_repo_config,
)


def test_an_empty_file_gives_the_documented_defaults() -> None:
    config = parse_repo_config("", ".github/reqdrive.yml")
    assert config == RepoConfig()
    assert (config.max_iterations, config.max_story_retries) == (10, 3)
    assert config.pr_labels == ["agent-generated"]
    assert config.gates_mode is GatesMode.SEQUENTIAL
    assert config.forbidden_globs("docs/requirements/REQ-1.md", ".github/reqdrive.yml") == [
        ".github/workflows/**",
        ".reqdrive/**",
        ".github/reqdrive.yml",
        "docs/requirements/REQ-1.md",
    ]


def test_camel_case_keys_nested_agent_and_gates_are_read() -> None:
    config = parse_repo_config(
        """
testCommand: python -m pytest -q
maxStoryRetries: 2
budgetUsd: 5
gatesMode: parallel
agent: {runner: command, model: m1, timeout: 30}
gates:
  - {name: types, command: mypy ., timeout: 60, junit: false}
forbiddenPaths: ["secrets/**"]
""",
        ".github/reqdrive.yml",
    )
    assert config.test_command == "python -m pytest -q"
    assert config.max_story_retries == 2 and config.budget_usd == 5.0
    assert config.gates_mode is GatesMode.PARALLEL
    assert (config.agent.runner, config.agent_model, config.agent.timeout) == ("command", "m1", 30)
    assert [g.name for g in config.gates] == ["types"]
    # A repository that lists its own forbidden paths decides, its config file included.
    assert config.forbidden_globs(None, ".github/reqdrive.yml") == ["secrets/**"]


def test_the_seeds_reqdrive_json_is_accepted() -> None:
    config = parse_repo_config(
        '{"version": "0.3.0", "projectName": "x", "model": "claude-sonnet", "testCommand": "t"}',
        "reqdrive.json",
    )
    assert config.agent_model == "claude-sonnet" and config.project_name == "x"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("maxIterations: ten", "key 'maxIterations'"),
        ("maxIterations: 0", "key 'maxIterations'"),
        ("maxStoryRetries: '3'", "key 'maxStoryRetries'"),
        ("testCommand: [a, b]", "key 'testCommand'"),
        ("prLabels: agent-generated", "key 'prLabels'"),
        ("gatesMode: sometimes", "key 'gatesMode'"),
        ("agent: {runner: gpt}", "key 'agent.runner'"),
        ("agent: {timeout: -1}", "key 'agent.timeout'"),
        ("agent: {sandbox: true}", "unknown key 'agent.sandbox'"),
        ("gates: [{name: x}]", "key 'gates[0].command'"),
        ("maxIteration: 3", "unknown key 'maxIteration'"),
        ("completionHook: rm -rf /", "unknown key 'completionHook'"),
        ("requiredPermission: everyone", "key 'requiredPermission'"),
    ],
)
def test_unknown_keys_and_wrong_types_name_the_key(text: str, named: str) -> None:
    with pytest.raises(RepoConfigError) as caught:
        parse_repo_config(text, ".github/reqdrive.yml")
    assert named in str(caught.value)
    assert str(caught.value).startswith(".github/reqdrive.yml: ")


@pytest.mark.parametrize("text", ["- a list\n- not a mapping", "key: [unclosed", "just a string"])
def test_a_file_that_is_not_a_mapping_is_refused(text: str) -> None:
    with pytest.raises(RepoConfigError, match=r"\.github/reqdrive\.yml"):
        parse_repo_config(text, ".github/reqdrive.yml")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".github/workflows/ci.yml", True),
        (".github/workflows/deep/x.yml", True),
        (".github/dependabot.yml", False),
        (".reqdrive/prompts/story.md.j2", True),
        ("src/.reqdrive/x", False),
        ("docs/requirements/REQ-1.md", True),
        ("docs/requirements/REQ-2.md", False),
    ],
)
def test_forbidden_globs_match_whole_paths_and_double_star_spans_folders(
    path: str, expected: bool
) -> None:
    globs = RepoConfig().forbidden_globs("docs/requirements/REQ-1.md")
    assert matches_any(path, globs) is expected


def test_single_star_stays_in_one_folder() -> None:
    assert matches_any("secrets/a.env", ["secrets/*.env"])
    assert not matches_any("secrets/x/a.env", ["secrets/*.env"])
    assert matches_any("build/x/y", ["build/"])


def test_double_star_spans_folders_whose_names_hold_a_newline() -> None:
    # A name may hold any character but "/": a conftest.py there is still every conftest.py.
    assert matches_any("extras\n/conftest.py", ["**/conftest.py"])
    assert matches_any("a\nb/c/d.env", ["**/*.env"])
    assert not matches_any("x\n.py", ["*.env"])


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def test_the_configuration_is_read_from_the_base_commit_not_the_working_tree(
    tmp_path: Path,
) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github/reqdrive.yml").write_text("maxIterations: 4\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "config")
    base = git(tmp_path, "rev-parse", "HEAD")
    # A later change (the agent's branch) must not count.
    (tmp_path / ".github/reqdrive.yml").write_text("maxIterations: 99\n")
    git(tmp_path, "commit", "-qam", "agent raises its own limit")
    config, path = read_repo_config(tmp_path, base)
    assert (config.max_iterations, path) == (4, ".github/reqdrive.yml")
    assert read_repo_config(tmp_path, git(tmp_path, "rev-parse", "HEAD"))[0].max_iterations == 99


def test_without_a_configuration_file_the_defaults_apply(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "README").write_text("x")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "init")
    assert read_repo_config(tmp_path, git(tmp_path, "rev-parse", "HEAD")) == (RepoConfig(), None)


@pytest.mark.parametrize(
    ("text", "filename", "message"),
    [
        (
            "testCommand: a\nlintCommand: l\ntestCommand: b\n",
            "r.yml",
            "key 'testCommand' appears twice (lines 1 and 3)",
        ),
        ("agent:\n  model: a\n  model: b\n", "r.yml", "key 'model' appears twice (lines 2 and 3)"),
        (
            '{"testCommand": "a", "testCommand": "b"}',
            "reqdrive.json",
            "key 'testCommand' appears twice",
        ),
        (
            "testCommand: pytest\ngates:\n  - {name: tests, command: 'true'}\n",
            "r.yml",
            "key 'gates[0].name': the gate name 'tests' is already used by 'testCommand'",
        ),
        (
            "gates:\n  - {name: types, command: mypy}\n  - {name: types, command: 'true'}\n",
            "r.yml",
            "key 'gates[1].name': the gate name 'types' is already used by 'gates[0].name'",
        ),
    ],
)
def test_a_key_or_gate_name_given_twice_is_refused_naming_it(
    text: str, filename: str, message: str
) -> None:
    with pytest.raises(RepoConfigError) as caught:
        parse_repo_config(text, filename)
    assert message in str(caught.value) and str(caught.value).startswith(f"{filename}: ")


def test_a_yaml_merge_key_may_still_be_overridden() -> None:
    text = "x: &d {a: 1}\n"  # anchors parse; the unknown key is the only complaint
    assert check_repo_config(text, "r.yml")[1] == ["unknown key 'x' (remove it)"]
    config = parse_repo_config("agent:\n  <<: {model: a}\n  model: b\n", "r.yml")
    assert config.agent_model == "b"


@pytest.mark.parametrize("key", ["prompts", "requirementsDir"])
@pytest.mark.parametrize("value", ["../../etc", "/etc", "docs/../../x", ""])
def test_folders_outside_the_repository_are_refused_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(RepoConfigError) as caught:
        parse_repo_config(f"{key}: '{value}'\n", "r.yml")
    assert f"key '{key}': value error, must be a folder inside the repository" in str(caught.value)


def test_unknown_keys_suggest_the_nearest_known_one() -> None:
    problems = check_repo_config("testComand: x\nagent: {modle: m}\n", "r.yml")[1]
    assert "unknown key 'testComand' (did you mean 'testCommand'?)" in problems
    assert "unknown key 'agent.modle' (did you mean 'model'?)" in problems


def test_a_config_nested_without_bound_or_too_large_is_refused() -> None:
    deep = "a: " + "[" * 5000 + "]" * 5000
    assert check_repo_config(deep, "r.yml")[1] == ["cannot be parsed: it is nested too deeply"]
    huge = "projectName: " + "x" * 300_000
    assert "keep it under 262144" in check_repo_config(huge, "r.yml")[1][0]
