"""`reqdrive init`'s `setup` suggestion: how the project installs what its checks import."""

from __future__ import annotations

import tomllib
from pathlib import Path

# Optional-dependency groups that hold the test tools, most likely first.
TEST_EXTRAS = ("test", "tests", "testing", "dev")
VENV_PIP = "python3 -m venv .venv && .venv/bin/pip install"


def suggested_setup(root: Path, stack: str) -> tuple[str, str] | None:
    """The setup command for this checkout and a note on using it, or None when its stack
    needs none init knows (everything it installs lands in the worktree, where the checks
    find it: each check's HOME is new)."""
    if stack == "python":
        return _python(root)
    if stack == "node" and (root / "package-lock.json").is_file():
        return "npm ci", "node_modules is made from package-lock.json and cached by its hash"
    if stack == "go" and not (root / "vendor").exists():
        note = (
            "go uses vendor/ by itself (go.mod's go 1.14 or later), so the checks need no "
            "network; add setupCache: {vendor: [go.sum]} to keep it between runs"
        )
        return "go mod vendor", note
    return None


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
