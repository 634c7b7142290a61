"""The `setup` and `setupCache` keys: read as written, refused where the cache could not go."""

from __future__ import annotations

import pytest

from worker.model.repo_config import check_repo_config, parse_repo_config


def test_setup_and_its_cache_folders_are_read() -> None:
    text = 'setup: "npm ci"\nsetupCache:\n  node_modules: [package-lock.json]\n'
    config = parse_repo_config(text, ".github/reqdrive.yml")
    assert config.setup == "npm ci"
    assert config.setup_cache == {"node_modules": ["package-lock.json"]}


@pytest.mark.parametrize(
    ("folder", "said"),
    [
        (".git", "must be a folder the setup fills"),
        (".", "must be a folder the setup fills"),
        ("../venv", "must be a folder inside the repository"),
        ("/opt/venv", "must be a folder inside the repository"),
    ],
)
def test_a_cache_folder_outside_the_worktree_or_in_git_is_refused(folder: str, said: str) -> None:
    config, problems = check_repo_config(f'setupCache: {{"{folder}": [uv.lock]}}\n', "x.yml")
    assert config is None
    assert len(problems) == 1 and said in problems[0] and "setupCache" in problems[0]
