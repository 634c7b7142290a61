"""`reqdrive validate`: the repository's config and every REQ-*.md, each problem on one line."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from worker.exceptions import PreflightError
from worker.local.config_drift import config_drift, current_branch
from worker.local.init_repo import TEST_COMMAND_PLACEHOLDER
from worker.local.requirement_checks import (
    content_problem,
    meant_as_requirement,
    never_runs,
    requirement_number,
)
from worker.model.repo_config import (
    CONFIG_PATHS,
    RepoConfig,
    check_repo_config,
    load_config_mapping,
)
from worker.model.requirement_files import REQUIREMENT_NAMES, is_requirement_file
from worker.model.slugs import slugify

SEEDS_CONFIG = "reqdrive.json"
YAML_CONFIG = ".github/reqdrive.yml"
KEY_RE = re.compile(r"^(?:unknown )?key '([^']*)'")
# A value still written as a placeholder, as init's comments and templates show them:
# `testCommand: "<the command that runs your tests>"` would run as a broken bash line.
PLACEHOLDER_RE = re.compile(r"\A<[^<>]+>\Z")
# Folders under requirementsDir never looked into for misnamed requirements.
SKIPPED_DIRS = frozenset({".git", ".reqdrive", "node_modules", ".venv"})
MAX_REQUIREMENT_BYTES = 256 * 1024  # a requirement is a page of Markdown
# The seeds' keys the App does not take, and what happens to them on --write.
SEEDS_DROPPED = {"completionHook": "reqdrive runs no completion hook; the key is dropped"}


@dataclass(frozen=True)
class Problem:
    """One thing to fix: the file, the key (or "" for the whole file) and what to do."""

    file: str
    key: str
    message: str

    def line(self) -> str:
        return f"{self.file}: {self.message}"


@dataclass
class Report:
    """What validate found: the config file used, the requirements seen, and the problems."""

    config_file: str | None = None
    requirements: list[str] = field(default_factory=list)
    config_problems: list[Problem] = field(default_factory=list)
    requirement_problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[Problem]:
        return [*self.config_problems, *self.requirement_problems]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = not self.problems
        data["problems"] = [asdict(p) for p in self.problems]
        del data["config_problems"], data["requirement_problems"]
        return data


def validate_repository(root: Path) -> Report:
    """Check the config the App would read (as it is in this checkout) and every REQ file."""
    report = Report()
    config = _check_config(root, report)
    folder = (config or RepoConfig()).requirements_dir.strip("/")
    _check_requirements(root, folder, report)
    return report


def _check_config(root: Path, report: Report) -> RepoConfig | None:
    present = [p for p in CONFIG_PATHS if (root / p).is_file()]
    if not present:
        report.notes.append(
            "no .github/reqdrive.yml: the defaults apply, and nothing checks a story "
            "(run `reqdrive init`)"
        )
        return RepoConfig()
    used = present[0]
    report.config_file = used
    for ignored in present[1:]:
        report.notes.append(f"{ignored} is ignored: {used} comes first")
    try:
        text = (root / used).read_text()
    except (OSError, UnicodeDecodeError) as error:
        report.config_problems.append(Problem(used, "", f"cannot be read: {error}"))
        return None
    config, problems = check_repo_config(text, used)
    for problem in problems:
        match = KEY_RE.match(problem)
        report.config_problems.append(Problem(used, match[1] if match else "", problem))
    if config is not None:
        report.config_problems += _placeholders(load_config_mapping(text, used), used)
        if TEST_COMMAND_PLACEHOLDER in text and not (
            config.test_command or config.lint_command or config.gates
        ):
            message = (
                "testCommand is still reqdrive init's commented-out placeholder: set it to the "
                "command that runs your tests (without a check nothing verifies a story)"
            )
            report.config_problems.append(Problem(used, "testCommand", message))
    _check_committed(root, report)
    if config is not None and not (config.test_command or config.lint_command or config.gates):
        report.notes.append(
            f"{used}: no testCommand, lintCommand or gates: nothing verifies a story and every "
            "pull request stays a draft"
        )
    return config


def _placeholders(raw: dict[str, Any], used: str) -> list[Problem]:
    """The keys whose value (or a gate's field) is still a `<...>` placeholder."""
    found = []
    for key, value in raw.items():
        values = value if isinstance(value, list) else [value]
        for item in values:
            texts = item.values() if isinstance(item, dict) else [item]
            left = [t for t in texts if isinstance(t, str) and PLACEHOLDER_RE.match(t.strip())]
            if left:
                message = f"key '{key}' still holds the placeholder {left[0]}: set it"
                found.append(Problem(used, key, message))
    return found


def _check_committed(root: Path, report: Report) -> None:
    """`run` reads the config from the branch, not the working tree: they must agree."""
    branch = current_branch(root)
    if branch is None:
        report.notes.append(
            "HEAD is detached: run reads the config committed on the branch --base names"
        )
        return
    drift = config_drift(root, branch)
    if drift is not None:
        report.config_problems.append(Problem(drift.path, "", drift.message()))


def _check_requirements(root: Path, folder: str, report: Report) -> None:
    base = root / folder
    if not base.is_dir():
        report.notes.append(
            f"{folder}/ does not exist yet: requirements go there as {REQUIREMENT_NAMES}"
        )
        return
    slugs: dict[str, str] = {}
    numbers: dict[int, str] = {}
    candidates = _candidates(base, top_only=folder in ("", "."))
    taken = [n for p in candidates if (n := requirement_number(p.name)) is not None]
    free = max(taken, default=0) + 1  # the number a duplicate's message suggests
    for path in candidates:
        name = path.relative_to(root).as_posix()
        if not is_requirement_file(name, folder):
            if meant_as_requirement(name):
                report.requirement_problems.append(Problem(name, "", never_runs(name, folder)))
            continue
        report.requirements.append(name)
        problem = _requirement_problem(path)
        if problem:
            report.requirement_problems.append(Problem(name, "", problem))
        slug = slugify(path.stem)
        if slug in slugs:
            report.requirement_problems.append(
                Problem(
                    name,
                    "",
                    f"has the same branch (reqdrive/{slug}) as {slugs[slug]}: rename one of them",
                )
            )
        slugs.setdefault(slug, name)
        _check_number(name, numbers, free, report)
    if not report.requirements:
        report.notes.append(f"{folder}/ holds no {REQUIREMENT_NAMES} yet")


def _candidates(base: Path, *, top_only: bool) -> list[Path]:
    """The files in requirementsDir, and in its subfolders (where a requirement never runs),
    unless the folder is the repository's top, whose subfolders are the project itself."""
    files = base.iterdir() if top_only else base.rglob("*")
    return sorted(
        p for p in files if p.is_file() and not SKIPPED_DIRS.intersection(p.relative_to(base).parts)
    )


def _check_number(name: str, numbers: dict[int, str], free: int, report: Report) -> None:
    """Two files with one number (REQ-001-a.md, REQ-001-b.md) name two requirements alike."""
    number = requirement_number(name)
    if number is None:
        return
    if number in numbers:
        report.requirement_problems.append(
            Problem(
                name,
                "",
                f"has the same number (REQ-{number:03d}) as {numbers[number]}: give one of "
                f"them a number of its own, such as REQ-{free:03d}",
            )
        )
    numbers.setdefault(number, name)


def _requirement_problem(path: Path) -> str | None:
    size = path.stat().st_size
    if size > MAX_REQUIREMENT_BYTES:
        return f"is {size} bytes; keep a requirement under {MAX_REQUIREMENT_BYTES} (split it)"
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return "is not UTF-8 text: save it as UTF-8"
    if not text.strip():
        return "is empty: write the requirement in it (a run of an empty file is refused)"
    if "\x00" in text:
        return "holds a NUL character: remove it"
    return content_problem(text)


def convert_seeds_config(root: Path) -> tuple[Path, list[str]]:
    """Write the seeds' reqdrive.json as .github/reqdrive.yml; what changed, in words."""
    source, target = root / SEEDS_CONFIG, root / YAML_CONFIG
    if not source.is_file():
        raise PreflightError(f"there is no {SEEDS_CONFIG} to convert in {root}")
    if target.exists():
        raise PreflightError(f"{YAML_CONFIG} already exists: edit it, or delete it and run again")
    raw = load_config_mapping(source.read_text(), SEEDS_CONFIG)
    changes = []
    for key, why in SEEDS_DROPPED.items():
        if raw.pop(key, None) is not None:
            changes.append(f"{key}: {why}")
    if raw.pop("version", None) is not None:
        changes.append("version: not needed in .github/reqdrive.yml; dropped")
    if "model" in raw:
        agent = raw.setdefault("agent", {})
        if isinstance(agent, dict):
            agent.setdefault("model", raw.pop("model"))
            changes.append("model: moved to agent.model")
    config, problems = check_repo_config(yaml.safe_dump(raw), YAML_CONFIG)
    if config is None:
        raise PreflightError(f"{SEEDS_CONFIG} cannot be converted: " + "; ".join(problems))
    header = f"# Converted from {SEEDS_CONFIG} by `reqdrive validate --write`.\n"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(header + yaml.safe_dump(raw, sort_keys=False))
    return target, changes
