"""The repository's reqdrive configuration, read from the base commit and validated."""

from __future__ import annotations

import difflib
import functools
import json
import re
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from worker.exceptions import RepoConfigError
from worker.model.gates import UNSAFE_NAME_RE, GateSpec
from worker.model.requirement_files import DEFAULT_REQUIREMENTS_DIR
from worker.model.review import ReviewMode
from worker.model.validation import Problem, problems

# Looked for in this order on the base commit; the first one found is the configuration.
CONFIG_PATHS = (".github/reqdrive.yml", ".github/reqdrive.yaml", "reqdrive.json")
DEFAULT_FORBIDDEN_PATHS = (".github/workflows/**", ".reqdrive/**")
# A configuration is a few hundred bytes; bounded so a pushed file cannot hold the parser.
MAX_CONFIG_BYTES = 256 * 1024


def _folder_in_repository(value: str) -> str:
    # Read with git from the base commit: "../../etc" made git fail with its own message.
    path = PurePosixPath(value)
    if (
        not value.strip()
        or path.is_absolute()
        or ".." in path.parts
        or "\\" in value
        or not value.isprintable()
    ):
        raise ValueError(
            "must be a folder inside the repository, relative to its top "
            "(such as docs/requirements or .reqdrive/prompts)"
        )
    return value


RepoFolder = Annotated[str, AfterValidator(_folder_in_repository)]


def _setup_folder(value: str) -> str:
    # Emptied and refilled from the cache before the setup runs: never the top or git's own.
    parts = [p for p in PurePosixPath(_folder_in_repository(value)).parts if p != "."]
    if not parts or ".git" in parts:
        raise ValueError("must be a folder the setup fills, such as .venv or node_modules")
    return value


SetupFolder = Annotated[str, AfterValidator(_setup_folder)]


# The folders a setup fills when `setupCache` names none, each with the files (globs at the
# top of the repository) whose content decides whether a saved copy still fits. The agent
# sees them read-only, whichever names them (worker/run/calls.py).
DEFAULT_SETUP_CACHE: dict[str, tuple[str, ...]] = {
    ".venv": ("requirements*.txt", "pyproject.toml", "uv.lock", "poetry.lock", "setup.py"),
    "node_modules": ("package-lock.json",),
}


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key written twice in one mapping (PyYAML keeps the
    last silently, so a second `testCommand` would quietly replace the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # "<<: *defaults" may be overridden key by key, as YAML intends
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, str | int | float | bool) and key in seen:
                raise RepoConfigError(
                    f"key '{key}' appears twice (lines {seen[key]} and {line}); keep one"
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise RepoConfigError(f"key '{key}' appears twice; keep one")
        seen[key] = value
    return seen


class GatesMode(StrEnum):
    """How the worker runs a story's gates."""

    SEQUENTIAL = "sequential"  # in order, stopping at the first failure
    PARALLEL = "parallel"  # all at once, every result reported


class TestsMode(StrEnum):
    """How a story's tests are written: frozen before its code, or in the same call."""

    __test__ = False  # a domain name, not a test class for pytest to collect

    FIRST = "first"  # a tests call, its tests proven and committed, then the implement call
    TOGETHER = "together"  # one call writes tests and code; the tests are not frozen


class StoryChecks(StrEnum):
    """What judges a story's commit: the whole suite, or the tests its change reaches."""

    WHOLE = "whole"  # every gate whole, on every story's commit
    # Only the pytest modules the story's change can reach by import (and its own tests),
    # while other stories remain; the whole suite judges the branch's head at the end, and
    # a test it finds broken is traced to the story that broke it (worker/run/end_bisect.py).
    AFFECTED = "affected"


class AgentConfig(BaseModel):
    """The repository's choice of agent; the service decides what each runner may do."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    runner: Literal["claude", "codex", "aider", "command"] | None = None
    model: str | None = None
    timeout: float | None = Field(default=None, gt=0)  # seconds per agent call


class RepoConfig(BaseModel):
    """Keys of .github/reqdrive.yml (or the seeds' reqdrive.json), camelCase as written."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)

    requirements_dir: RepoFolder = Field(default=DEFAULT_REQUIREMENTS_DIR, alias="requirementsDir")
    base_branch: str | None = Field(default=None, alias="baseBranch")
    test_command: str | None = Field(default=None, alias="testCommand")
    lint_command: str | None = Field(default=None, alias="lintCommand")
    # Run in the worktree before the baseline (`pip install -e .[test]`, `npm ci`), in the
    # checks' sandbox with the package registries reachable.
    setup: str | None = Field(default=None, min_length=1)
    # Folders the setup fills, each with the files whose content keys its cache (globs at the
    # top of the repository); None: the ecosystem defaults (DEFAULT_SETUP_CACHE).
    setup_cache: dict[SetupFolder, list[str]] | None = Field(default=None, alias="setupCache")
    gates: list[GateSpec] = Field(default_factory=list)
    # strict mode would demand an enum instance; YAML gives the string
    gates_mode: GatesMode = Field(default=GatesMode.SEQUENTIAL, alias="gatesMode", strict=False)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    # The blind review after a story's gates pass (worker/review), and the agent it uses:
    # by default the story's runner with that runner's cheaper model.
    review: ReviewMode = Field(default=ReviewMode.TRIANGULAR, strict=False)
    review_agent: AgentConfig = Field(default_factory=AgentConfig, alias="reviewAgent")
    max_iterations: int = Field(default=10, ge=1, alias="maxIterations")
    max_story_retries: int = Field(default=3, ge=1, alias="maxStoryRetries")
    budget_usd: float | None = Field(default=None, gt=0, alias="budgetUsd")
    pr_labels: list[str] = Field(default_factory=lambda: ["agent-generated"], alias="prLabels")
    trigger_label: str = Field(default="reqdrive", alias="triggerLabel")
    required_permission: Literal["read", "triage", "write", "maintain", "admin"] = Field(
        default="write", alias="requiredPermission"
    )
    forbidden_paths: list[str] | None = Field(default=None, alias="forbiddenPaths")
    prompts: RepoFolder = ".reqdrive/prompts"
    # The files that define or configure tests (globs); None: the ecosystem defaults
    # (worker/verdict/test_side.py). The always-guarded names are added either way.
    test_paths: list[str] | None = Field(default=None, alias="testPaths")
    tests: TestsMode = Field(default=TestsMode.FIRST, strict=False)
    checks: StoryChecks = Field(default=StoryChecks.WHOLE, strict=False)
    # Red CI on a reqdrive pull request: a CI-fix story on its branch, at most this many per
    # chain of pushes (a person's push hands the PR back; `/reqdrive fix` asks again).
    ci_fix: bool = Field(default=True, alias="ciFix")
    ci_fix_attempts: int = Field(default=2, ge=0, le=10, alias="ciFixAttempts")
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
    config, problems = check_repo_config(text, filename)
    if config is None:
        raise RepoConfigError(f"{filename}: " + "; ".join(problems))
    return config


def check_repo_config(text: str, filename: str) -> tuple[RepoConfig | None, list[str]]:
    """The configuration, or None and every problem found, each naming its key and the fix."""
    try:
        raw = load_config_mapping(text, filename)
    except RepoConfigError as exc:
        return None, [str(exc)]
    try:
        config = RepoConfig.model_validate(raw)
    except ValidationError as exc:
        return None, _describe(exc)
    problems = _gate_name_problems(config)
    return (None if problems else config), problems


def load_config_mapping(text: str, filename: str) -> dict[str, Any]:
    """The file's keys and values, refused (naming the line or key) before validation when
    it is too large, not YAML/JSON, nested without bound, or has a key twice."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_CONFIG_BYTES:
        raise RepoConfigError(f"the file is {size} bytes; keep it under {MAX_CONFIG_BYTES}")
    try:
        if filename.endswith(".json"):
            raw = json.loads(text, object_pairs_hook=_unique_keys)
        else:
            raw = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise RepoConfigError(f"cannot be parsed: {exc}") from None
    except RecursionError:
        raise RepoConfigError("cannot be parsed: it is nested too deeply") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RepoConfigError("must be a mapping of keys to values (key: value lines)")
    return raw


def _gate_name_problems(config: RepoConfig) -> list[str]:
    """Every gate needs its own name: results, logs and the PR's table are keyed by it, and a
    passing custom gate named `tests` would hide a failing testCommand."""
    named = [("testCommand", "tests")] if config.test_command else []
    named += [("lintCommand", "lint")] if config.lint_command else []
    named += [(f"gates[{i}].name", g.name) for i, g in enumerate(config.gates)]
    owner: dict[str, str] = {}
    problems = []
    for key, name in named:
        file_name = UNSAFE_NAME_RE.sub("_", name)  # logs are <label>.<name>.log
        if file_name in owner:
            problems.append(
                f"key '{key}': the gate name '{name}' is already used by '{owner[file_name]}'; "
                "give each gate its own name"
            )
        owner.setdefault(file_name, key)
    return problems


def _describe(exc: ValidationError) -> list[str]:
    described = []
    for problem in problems(exc):
        key = problem.path
        if problem.kind == "extra_forbidden":
            described.append(f"unknown key '{key}'{_did_you_mean(key)}")
        else:
            described.append(f"key '{key}': {problem.message.lower()} (got {_shown(problem)})")
    return described


def _did_you_mean(key: str) -> str:
    parent, _, last = key.rpartition(".")
    if parent.startswith("gates["):
        known = ["name", "command", "timeout", "junit", "runner"]
    else:
        agents = ("agent", "reviewAgent")
        model: type[BaseModel] = AgentConfig if parent in agents else RepoConfig
        known = [f.alias or name for name, f in model.model_fields.items()]
    close = difflib.get_close_matches(last, known, n=1)
    return f" (did you mean '{close[0]}'?)" if close else " (remove it)"


def _shown(problem: Problem) -> str:
    value = problem.value
    text = (
        json.dumps(value)
        if isinstance(value, str | int | float | bool | None)
        else type(value).__name__
    )
    return text[:80]


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
    # A path's names may hold any character but "/", a newline too: `**` must cross it, or
    # "extras\n/conftest.py" would slip past `**/conftest.py` (the test side, forbidden paths).
    return re.compile(pattern, re.DOTALL)
