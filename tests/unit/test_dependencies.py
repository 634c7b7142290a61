"""Every runtime dependency in pyproject.toml is used by the code that ships."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Distribution name → how the shipped code uses it (import name, or a module run with -m).
USED_AS = {
    "pygithub": "github",
    "pyyaml": "yaml",
    "python-dotenv": "dotenv",
    "pydantic-settings": "pydantic_settings",
}


def test_every_runtime_dependency_is_imported_or_run_by_bot_or_worker() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[<>=!~ \[]", spec, maxsplit=1)[0] for spec in project["dependencies"]]
    source = "\n".join(p.read_text() for d in ("bot", "worker") for p in (ROOT / d).rglob("*.py"))
    unused = []
    for name in names:
        module = USED_AS.get(name.lower(), name.lower().replace("-", "_"))
        if not re.search(rf"^\s*(import|from) {module}\b|\"{module}\"", source, re.MULTILINE):
            unused.append(name)
    assert unused == []
