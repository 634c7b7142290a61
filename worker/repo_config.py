"""The repository's reqdrive configuration, read from the base commit and validated."""

from __future__ import annotations

import functools
import json
import re
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from worker.exceptions import RepoConfigError
from worker.gates import GateSpec
from worker.workspace import run_git

# Looked for in this order on the base commit; the first one found is the configuration.
CONFIG_PATHS = (".github/reqdrive.yml", ".github/reqdrive.yaml", "reqdrive.json")
DEFAULT_FORBIDDEN_PATHS = (".github/workflows/**", ".reqdrive/**")


class GatesMode(StrEnum):
    """How the worker runs a story's gates."""

    SEQUENTIAL = "sequential"  # in order, stopping at the first failure
    PARALLEL = "parallel"  # all at once, every result reported


class AgentConfig(BaseModel):
    """The repository's choice of agent; the service decides what each runner may do."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    runner: Literal["claude", "codex", "aider", "command"] | None = None
    model: str | None = None
    timeout: float | None = Field(default=None, gt=0)  # seconds per agent call


class RepoConfig(BaseModel):
    """Keys of .github/reqdrive.yml (or the seeds' reqdrive.json), camelCase as written."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)

    requirements_dir: str = Field(default="docs/requirements", alias="requirementsDir")
    base_branch: str | None = Field(default=None, alias="baseBranch")
    test_command: str | None = Field(default=None, alias="testCommand")
    lint_command: str | None = Field(default=None, alias="lintCommand")
    gates: list[GateSpec] = Field(default_factory=list)
    # strict mode would demand an enum instance; YAML gives the string
    gates_mode: GatesMode = Field(default=GatesMode.SEQUENTIAL, alias="gatesMode", strict=False)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    max_iterations: int = Field(default=10, ge=1, alias="maxIterations")
    max_story_retries: int = Field(default=3, ge=1, alias="maxStoryRetries")
    budget_usd: float | None = Field(default=None, gt=0, alias="budgetUsd")
    pr_labels: list[str] = Field(default_factory=lambda: ["agent-generated"], alias="prLabels")
    trigger_label: str = Field(default="reqdrive", alias="triggerLabel")
    required_permission: Literal["read", "triage", "write", "maintain", "admin"] = Field(
        default="write", alias="requiredPermission"
    )
    forbidden_paths: list[str] | None = Field(default=None, alias="forbiddenPaths")
    prompts: str = ".reqdrive/prompts"
    # Accepted because the seeds' reqdrive.json carries them.
    version: str | None = None
    project_name: str | None = Field(default=None, alias="projectName")
    model: str | None = None  # the seeds' top-level model; agent.model wins

    def forbidden_globs(
        self, requirement_path: str | None, config_path: str | None = None
    ) -> list[str]:
        """Paths the agent may not change: the configured list, or by default workflows,
        reqdrive's own folder and its configuration file; and always the requirement being
        implemented, which the agent must never rewrite to fit its work."""
        if self.forbidden_paths is None:
            globs = [*DEFAULT_FORBIDDEN_PATHS, *([config_path] if config_path else [])]
        else:
            globs = list(self.forbidden_paths)
        if requirement_path and requirement_path not in globs:
            globs.append(requirement_path)
        return globs

    @property
    def agent_model(self) -> str | None:
        return self.agent.model or self.model


def parse_repo_config(text: str, filename: str) -> RepoConfig:
    """Parse one configuration file's text; every problem names its key."""
    try:
        raw = json.loads(text) if filename.endswith(".json") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise RepoConfigError(f"{filename} cannot be parsed: {exc}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RepoConfigError(f"{filename} must be a mapping of keys to values")
    try:
        return RepoConfig.model_validate(raw)
    except ValidationError as exc:
        raise RepoConfigError(f"{filename}: " + "; ".join(_describe(exc))) from None


def _describe(exc: ValidationError) -> list[str]:
    problems = []
    for error in exc.errors():
        key = _key(error["loc"])
        if error["type"] == "extra_forbidden":
            problems.append(f"unknown key '{key}'")
        else:
            problems.append(f"key '{key}': {error['msg'].lower()} (got {_shown(error)})")
    return problems


def _key(loc: tuple[int | str, ...]) -> str:
    # Literal and union errors append the member tried ("str", "literal['a']"); the user
    # wrote a key, so only the path down to it is shown.
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif "[" in part or part in {"str", "float", "int", "list", "none"}:
            break
        else:
            text += f".{part}" if text else part
    return text


def _shown(error: Any) -> str:
    value = error.get("input")
    text = (
        json.dumps(value)
        if isinstance(value, str | int | float | bool | None)
        else type(value).__name__
    )
    return text[:80]


def read_repo_config(worktree: Path, base_sha: str) -> tuple[RepoConfig, str | None]:
    """The configuration on the base commit, never the agent's branch; and where it was."""
    for path in CONFIG_PATHS:
        text = read_file_at(worktree, base_sha, path)
        if text is not None:
            return parse_repo_config(text, path), path
    return RepoConfig(), None


def read_file_at(cwd: Path, sha: str, path: str) -> str | None:
    """A file's text at a commit, or None when the commit has no such file."""
    listed = run_git(["ls-tree", "--name-only", sha, "--", path], cwd=cwd)
    if listed.strip() != path:
        return None
    return run_git(["cat-file", "blob", f"{sha}:{path}"], cwd=cwd)


def matches_any(path: str, globs: list[str]) -> bool:
    """Whether a repository path falls under any forbiddenPaths glob (`**` spans folders)."""
    return any(_glob_re(glob).fullmatch(path) for glob in globs)


@functools.cache
def _glob_re(glob: str) -> re.Pattern[str]:
    glob = glob.strip().lstrip("/")
    if glob.endswith("/"):
        glob += "**"  # a folder means everything under it
    pattern, i = "", 0
    while i < len(glob):
        if glob.startswith("**/", i):
            pattern, i = pattern + "(?:.*/)?", i + 3
        elif glob.startswith("**", i):
            pattern, i = pattern + ".*", i + 2
        elif glob[i] == "*":
            pattern, i = pattern + "[^/]*", i + 1
        elif glob[i] == "?":
            pattern, i = pattern + "[^/]", i + 1
        else:
            pattern, i = pattern + re.escape(glob[i]), i + 1
    return re.compile(pattern)
