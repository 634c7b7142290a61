"""One reading of pydantic's errors for prd.json, .github/reqdrive.yml and the settings."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from worker.model.validation import path_of, problems


class Gate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["serial", "parallel"] | None = None
    name: str

    @field_validator("name")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if "\n" in value:
            raise ValueError("must be one line")
        return value


class Doc(BaseModel):
    gates: list[Gate]


def test_each_problem_has_its_path_kind_message_and_value() -> None:
    with pytest.raises(ValidationError) as caught:
        Doc.model_validate({"gates": [{"name": "a"}, {"name": "b\nc", "mode": "x", "extra": 1}]})
    found = {p.path: p for p in problems(caught.value)}
    assert set(found) == {"gates[1].name", "gates[1].mode", "gates[1].extra"}
    assert found["gates[1].name"].reason == "must be one line"
    assert found["gates[1].name"].message == "Value error, must be one line"
    assert found["gates[1].extra"].kind == "extra_forbidden"
    assert found["gates[1].mode"].value == "x"
    assert found["gates[1].name"].field == "gates"


@pytest.mark.parametrize(
    ("loc", "path"),
    [
        (("userStories", 0, "id"), "userStories[0].id"),
        (("agent", "timeout", "float"), "agent.timeout"),  # a union member's tag is not a key
        (("gatesMode", "literal['serial','parallel']"), "gatesMode"),
        ((), ""),
    ],
)
def test_paths_read_as_the_user_wrote_them(loc: tuple[int | str, ...], path: str) -> None:
    assert path_of(loc) == path
