"""The PRD an agent plans: its model, validation, and the worker's choice of the next story."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from worker.exceptions import PrdError

MIN_STORIES = 1
MAX_STORIES = 8
# A story id: ASCII letters and digits, inner ".", "_", "-"; at most 40 characters.
STORY_ID_RE = re.compile(r"\A[A-Za-z0-9](?:[A-Za-z0-9._-]{0,38}[A-Za-z0-9])?\Z", re.ASCII)
PRD_VERSION = "1"


class Story(BaseModel):
    """One user story; `passes` and `attempts` belong to the worker, never to the agent."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    id: str = Field(min_length=1, max_length=40)
    title: str = Field(min_length=1, max_length=200)
    description: str = ""
    acceptance_criteria: list[str] = Field(alias="acceptanceCriteria", min_length=1)
    priority: StrictInt
    passes: bool = False
    attempts: int = 0
    notes: str = ""
    # Ids of the base commit's failing tests this story must make pass (the worker checks
    # that each exists); the story may add tests of its own besides.
    tests: list[str] = Field(default_factory=list, max_length=500)

    @field_validator("id")
    @classmethod
    def _id_is_a_story_id(cls, value: str) -> str:
        # The id goes into commit subjects, prompts, branch trailers and "/reqdrive retry ID"
        # commands: one ASCII word, so what a person types is exactly what the plan holds.
        if not STORY_ID_RE.match(value):
            raise ValueError("must be one word of ascii letters, digits, '.', '_' or '-'")
        if any(ch.isspace() for ch in value):
            raise ValueError("must not contain whitespace")
        return value


class Prd(BaseModel):
    """The plan for one requirement, as prd.json holds it (the seeds' schema)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    version: str = PRD_VERSION
    project: str = ""
    source_req: str = Field(default="", alias="sourceReq")
    user_stories: list[Story] = Field(alias="userStories")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")

    def story(self, story_id: str) -> Story:
        for story in self.user_stories:
            if story.id == story_id:
                return story
        raise KeyError(story_id)


def parse_prd(text: str) -> Prd:
    """Validate an agent-written prd.json and reset the fields the worker owns."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PrdError(f"prd.json is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(raw, dict):
        raise PrdError("prd.json must be a JSON object with a userStories list")
    try:
        prd = Prd.model_validate(raw)
    except ValidationError as exc:
        raise PrdError(_describe(exc)) from None
    _check_stories(prd.user_stories)
    # Whatever the agent wrote, nothing has passed and nothing has been tried yet.
    fresh = [s.model_copy(update={"passes": False, "attempts": 0}) for s in prd.user_stories]
    return prd.model_copy(update={"user_stories": fresh})


def _check_stories(stories: Sequence[Story]) -> None:
    if not MIN_STORIES <= len(stories) <= MAX_STORIES:
        raise PrdError(
            f"prd.json: userStories has {len(stories)} stories; "
            f"a plan needs {MIN_STORIES} to {MAX_STORIES}"
        )
    seen: set[str] = set()
    for story in stories:
        if story.id in seen:
            raise PrdError(f"prd.json: story id {story.id!r} is used more than once")
        seen.add(story.id)


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        where = _location(error["loc"])
        problems.append(f"{where}: {error['msg'].lower()}")
    return "prd.json is invalid: " + "; ".join(problems)


def _location(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "prd.json"


def select_next_story(
    stories: Sequence[Story], *, max_story_retries: int, settled: Collection[str] = ()
) -> Story | None:
    """The story to work on next: not passed, not settled, under the retry limit.

    Lowest priority number first, then id, so the same state always gives the same story.
    """
    candidates = [
        s
        for s in stories
        if not s.passes and s.id not in settled and s.attempts < max_story_retries
    ]
    return min(candidates, key=lambda s: (s.priority, s.id), default=None)
