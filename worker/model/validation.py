"""Pydantic's validation errors as problems a person can act on: where, what, the value given."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import ValidationError

# Literal and union errors append the member tried ("str", "literal['a']") to the location;
# the user wrote a key, so only the path down to it is shown.
MEMBER_TAGS = frozenset({"str", "float", "int", "list", "none"})


@dataclass(frozen=True)
class Problem:
    """One validation error: the path to the value, pydantic's kind and message, the value."""

    path: str  # "userStories[0].id", "agent.timeout", "" for the whole document
    kind: str  # pydantic's error type: "missing", "extra_forbidden", ...
    message: str  # pydantic's text, e.g. "Value error, must be one line"
    value: object

    @property
    def field(self) -> str:
        """The top-level field the problem is in."""
        return self.path.split(".", 1)[0].split("[", 1)[0]

    @property
    def reason(self) -> str:
        """The message without the prefix pydantic gives a validator's ValueError."""
        return self.message.removeprefix("Value error, ")


def problems(exc: ValidationError) -> list[Problem]:
    """Every error of a validation, in pydantic's order."""
    return [Problem(path_of(e["loc"]), e["type"], e["msg"], e.get("input")) for e in exc.errors()]


def path_of(loc: Sequence[int | str]) -> str:
    """`("userStories", 0, "id")` → `userStories[0].id`, stopping at a union member's tag."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif "[" in part or part in MEMBER_TAGS:
            break
        else:
            text += f".{part}" if text else part
    return text
