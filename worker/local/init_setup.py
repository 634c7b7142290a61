"""`reqdrive init`'s `setup` suggestion: how the project installs what its checks import."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

# Optional-dependency groups that hold the test tools, most likely first.
TEST_EXTRAS = ("test", "tests", "testing", "dev")
VENV_PIP = "python3 -m venv .venv && .venv/bin/pip install"
# packageManager as package.json gives it: a name, a version, perhaps a hash (`pnpm@9.1.0+sha...`).
PACKAGE_SPEC_RE = re.compile(r"\A(?:pnpm|yarn)@[0-9][\w.-]*(?:\+[\w.]+)?\Z")


def suggested_setup(root: Path, stack: str) -> tuple[str, str] | None:
    """The setup command for this checkout and a note on using it, or None when its stack
    needs none init knows (everything it installs lands in the worktree, where the checks
    find it: each check's HOME is new)."""
    if stack == "python":
        return _python(root)
    if stack == "node":
        return _node(root)
    if stack == "go" and not (root / "vendor").exists():
        note = (
            "go uses vendor/ by itself (go.mod's go 1.14 or later), so the checks need no "
            "network; add setupCache: {vendor: [go.sum]} to keep it between runs"
        )
        return "go mod vendor", note
    return None


def _node(root: Path) -> tuple[str, str] | None:
    if (root / "package-lock.json").is_file():
        return "npm ci", "node_modules is made from package-lock.json and cached by its hash"
    manager = _package_manager(root / "package.json")
    if (root / "pnpm-lock.yaml").is_file():
        spec = manager if manager.startswith("pnpm@") else "pnpm"
        note = (
            "pnpm-lock.yaml pins the tree; npx fetches pnpm from the registry (the version "
            "package.json's packageManager names); add setupCache: {node_modules: "
            "[pnpm-lock.yaml]} to keep node_modules between runs"
        )
        return f"npx --yes {spec} install --frozen-lockfile", note
    if (root / "yarn.lock").is_file():
        if manager and not manager.startswith("yarn@1."):
            return None  # yarn 2+ installs through corepack, in a layout of its own
        note = (
            "yarn.lock pins the tree; npx fetches yarn 1 from the registry; add setupCache: "
            "{node_modules: [yarn.lock]} to keep node_modules between runs"
        )
        return f"npx --yes {manager or 'yarn@1'} install --frozen-lockfile", note
    if not _declares_packages(root / "package.json"):
        return None
    note = (
        "there is no package-lock.json, so every run resolves the newest versions package.json "
        "allows and nothing is cached (node_modules is cached by the lockfile's hash): commit "
        "a package-lock.json and use npm ci"
    )
    return "npm install --no-audit --no-fund", note


def _declares_packages(package_json: Path) -> bool:
    package = _read_json(package_json)
    return any(
        isinstance(package.get(key), dict) and package[key]
        for key in ("dependencies", "devDependencies")
    )


def _package_manager(package_json: Path) -> str:
    """package.json's packageManager without its hash (`pnpm@9.1.0`), or ""."""
    value = _read_json(package_json).get("packageManager")
    return value.split("+", 1)[0] if isinstance(value, str) and PACKAGE_SPEC_RE.match(value) else ""


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _python(root: Path) -> tuple[str, str] | None:
    if (root / "uv.lock").is_file():
        return "uv sync --frozen", "then start the tests with .venv/bin/python -m pytest"
    extra = _test_extra(root / "pyproject.toml")
    if extra is not None or _installable(root):
        # Without a test extra, pytest (named in tox.ini or setup.cfg, or suggested for a
        # unittest suite) is in no install of the project: the venv would have no runner.
        target = f"'.[{extra}]'" if extra else ". pytest"
        note = (
            "the worktree's own package is installed (editable) in .venv, cached by the "
            "lockfiles' hash: start the tests with .venv/bin/python -m pytest"
        )
        return f"{VENV_PIP} -e {target}", note
    requirements = root / "requirements.txt"
    if requirements.is_file():
        note = "start the tests with .venv/bin/python -m pytest"
        return f"{VENV_PIP} -r requirements.txt", note
    return None


def _test_extra(pyproject: Path) -> str | None:
    """The first optional-dependency group of TEST_EXTRAS that pyproject.toml declares."""
    try:
        data = tomllib.loads(pyproject.read_text(errors="replace"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    project = data.get("project")
    extras = project.get("optional-dependencies") if isinstance(project, dict) else None
    if not isinstance(extras, dict):
        return None
    return next((name for name in TEST_EXTRAS if name in extras), None)


def _installable(root: Path) -> bool:
    """Whether pip can install the checkout itself (a build system or a setup.py)."""
    if (root / "setup.py").is_file():
        return True
    pyproject = root / "pyproject.toml"
    try:
        data = tomllib.loads(pyproject.read_text(errors="replace"))
    except (OSError, tomllib.TOMLDecodeError):
        return False
    return "project" in data or "build-system" in data
