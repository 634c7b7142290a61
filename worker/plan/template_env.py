"""The one Jinja2 environment prompts render in: strict always, sandboxed for a repository's own."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2
from jinja2.exceptions import SecurityError
from jinja2.sandbox import SandboxedEnvironment

MAX_RANGE = 10_000  # items one range() may give (Jinja's own sandbox allows 100,000)
MAX_VALUE_CHARS = 100_000  # a string or list built with * inside the template
OPTIONS: dict[str, Any] = {
    "undefined": jinja2.StrictUndefined,  # a missing variable is an error, not an empty string
    "autoescape": False,  # prompts are Markdown for a model, not HTML
    "trim_blocks": True,
    "lstrip_blocks": True,
    "keep_trailing_newline": True,
}


def builtin_environment(folder: Path) -> jinja2.Environment:
    """reqdrive's own templates in `folder`: trusted, so not sandboxed."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader(folder), **OPTIONS)  # noqa: S701


def override_environment(templates: Mapping[str, str]) -> jinja2.Environment:
    """A repository's templates (name to text): code from whoever can push to the base
    branch, so rendered in Jinja2's sandbox, with small ranges and repetitions."""
    return BoundedSandbox(loader=jinja2.DictLoader(dict(templates)), **OPTIONS)


class BoundedSandbox(SandboxedEnvironment):
    """Jinja2's sandbox with small ranges and no huge repetition or power."""

    intercepted_binops = frozenset({"*", "**"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.globals["range"] = _small_range

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        if operator_name == "**":
            if isinstance(right, int) and abs(right) > 64:
                raise SecurityError(f"the power {right} is larger than 64")
            return operator.pow(left, right)
        if isinstance(left, str | list | tuple) and isinstance(right, int):
            size = len(left) * right
        elif isinstance(right, str | list | tuple) and isinstance(left, int):
            size = len(right) * left
        else:
            size = 0
        if size > MAX_VALUE_CHARS:
            raise SecurityError(
                f"a repetition would make {size} items; the limit is {MAX_VALUE_CHARS}"
            )
        return operator.mul(left, right)


def _small_range(*args: int) -> range:
    items = range(*args)
    if len(items) > MAX_RANGE:
        raise SecurityError(f"range() of {len(items)} items; the limit is {MAX_RANGE}")
    return items
