"""docs/ stays true to the code: every setting and every repository key is documented."""

from __future__ import annotations

import re
from pathlib import Path

from bot.settings import Settings
from worker.gates import GateSpec
from worker.repo_config import AgentConfig, RepoConfig

ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()


def test_every_environment_variable_of_settings_is_in_the_configuration_reference() -> None:
    # Excluded fields are not variables (process_environment is the environment itself).
    names = [name.upper() for name, field in Settings.model_fields.items() if not field.exclude]
    missing = [name for name in names if f"`{name}`" not in CONFIGURATION]
    assert missing == []


def test_every_repository_key_is_in_the_configuration_reference() -> None:
    # `agent` itself is documented by its keys, agent.runner and so on.
    keys = [field.alias or name for name, field in RepoConfig.model_fields.items()]
    keys.remove("agent")
    keys += [f"agent.{name}" for name in AgentConfig.model_fields]
    missing = [key for key in keys if f"`{key}`" not in CONFIGURATION]
    assert missing == []
    for name in GateSpec.model_fields:  # gate keys, as the gates row names them
        assert re.search(rf"\b{name.removesuffix('_s')}\b", CONFIGURATION), name


def test_the_docs_link_each_other_and_the_readme_links_them() -> None:
    readme = (ROOT / "README.md").read_text()
    for page in ("architecture.md", "configuration.md", "operations.md"):
        assert (ROOT / "docs" / page).exists()
        assert f"docs/{page}" in readme
