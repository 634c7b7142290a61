"""Prompt rendering: the built-in templates, or the repository's own in Jinja2's sandbox."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from worker.exceptions import RepoConfigError
from worker.git.at_commit import read_file_at
from worker.git.runner import run_git
from worker.plan.override_render import OverrideError, RenderLimits, render_override
from worker.plan.template_env import builtin_environment

PROMPTS_DIR = Path(__file__).parent / "prompts"
PLAN_TEMPLATE = "plan.md.j2"
STORY_TEMPLATE = "story.md.j2"
TESTS_TEMPLATE = "tests.md.j2"  # a story's tests call, before its code (tests: first)
TEMPLATE_NAMES = (PLAN_TEMPLATE, STORY_TEMPLATE, TESTS_TEMPLATE)
DEFAULT_FOLDER = ".reqdrive/prompts"  # the `prompts` key's default


class PromptRenderer:
    """Renders a named prompt with plain values; values are never parsed as templates."""

    def __init__(
        self,
        overrides: Mapping[str, str] | None = None,
        *,
        folder: str = DEFAULT_FOLDER,
        limits: RenderLimits = RenderLimits(),  # noqa: B008 - frozen, shared safely
    ) -> None:
        self._overrides = dict(overrides or {})
        self._folder = folder.strip("/")
        self._limits = limits
        self._builtin = builtin_environment(PROMPTS_DIR)

    def render(self, name: str, **values: Any) -> str:
        if name not in self._overrides:
            return self._builtin.get_template(name).render(**values)
        # A repository's template is code from whoever can push to the base branch: it runs
        # in Jinja2's sandbox (no Python internals), in a child process bounded in CPU time,
        # memory and output (no loop or allocation without end).
        try:
            return render_override(self._overrides, name, values, self._limits)
        except OverrideError as exc:
            raise RepoConfigError(
                f"prompt override {self._folder}/{name} cannot be rendered: {exc}; fix it on "
                "the base branch, or delete it to use the built-in prompt"
            ) from None


def load_overrides(worktree: Path, base_sha: str, folder: str) -> dict[str, str]:
    """Template overrides from the prompts folder as it is on the base commit, never the branch
    the agent writes to."""
    folder = folder.strip("/")
    listed = run_git(["ls-tree", "--name-only", base_sha, "--", f"{folder}/"], cwd=worktree)
    present = {line.rsplit("/", 1)[-1] for line in listed.splitlines()}
    overrides = {}
    for name in TEMPLATE_NAMES:
        if name in present:
            text = read_file_at(worktree, base_sha, f"{folder}/{name}")
            if text is not None:
                overrides[name] = text
    return overrides
