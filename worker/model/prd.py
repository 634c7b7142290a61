"""The PRD an agent plans: its model and validation."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    field_validator,
)

from worker.exceptions import PrdError
from worker.model.validation import problems

MIN_STORIES = 1
MAX_STORIES = 8
# A story id: ASCII letters and digits, inner ".", "_", "-"; at most 40 characters.
STORY_ID_RE = re.compile(r"\A[A-Za-z0-9](?:[A-Za-z0-9._-]{0,38}[A-Za-z0-9])?\Z", re.ASCII)
PRD_VERSION = "1"
# A plan is a few KiB. Bounded before parsing: json.loads of a file nested 100,000 deep
# raises RecursionError, and every field below reaches prompts, commits and the PR body.
MAX_PRD_BYTES = 1024 * 1024
MAX_JSON_DEPTH = 32
MAX_TITLE_CHARS = 200
MAX_TEXT_CHARS = 10_000  # a description, a note
MAX_CRITERION_CHARS = 1_000
MAX_CRITERIA = 50
MAX_TEST_ID_CHARS = 1_000
STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
NOT_A_BRACKET_RE = re.compile(r"[^\[\]{}]+")
# Invisible characters that reorder what a reviewer sees ("Trojan Source"), refused with the
# control characters wherever a line of agent text is shown.
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
LINE_BREAKS = frozenset("\n\r\t")


def _control_in(value: str, allowed: frozenset[str]) -> str | None:
    for ch in value:
        if ch in allowed:
            continue
        if unicodedata.category(ch) == "Cc" or ch in BIDI_CONTROLS:
            return ch
    return None


def _one_line(value: str) -> str:
    # A NUL reached `git commit -m` and ended the run in a traceback; a newline in a title
    # splits the commit subject.
    found = _control_in(value, frozenset())
    if found is not None:
        raise ValueError(f"must be one line without control characters (found {found!a})")
    return value


def _text(value: str) -> str:
    found = _control_in(value, LINE_BREAKS)
    if found is not None:
        raise ValueError(f"must not contain control characters (found {found!a})")
    return value


Title = Annotated[str, Field(min_length=1, max_length=MAX_TITLE_CHARS), AfterValidator(_one_line)]
Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS), AfterValidator(_text)]
Criterion = Annotated[
    str, Field(min_length=1, max_length=MAX_CRITERION_CHARS), AfterValidator(_text)
]
TestId = Annotated[
    str, Field(min_length=1, max_length=MAX_TEST_ID_CHARS), AfterValidator(_one_line)
]


class ChangedTest(BaseModel):
    """An existing test file a story must change, and why: a person reviews the change."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True)

    path: Annotated[
        str, Field(min_length=1, max_length=MAX_CRITERION_CHARS), AfterValidator(_one_line)
    ]
    reason: Annotated[
        str, Field(min_length=1, max_length=MAX_CRITERION_CHARS), AfterValidator(_one_line)
    ]

    @field_validator("path")
    @classmethod
    def _path_in_repository(cls, value: str) -> str:
        parts = value.split("/")
        if value.startswith("/") or ".." in parts or "\\" in value or "*" in value:
            raise ValueError("must be one file's path inside the repository, relative to its top")
        return value


class Story(BaseModel):
    """One user story as the plan gives it. What the worker makes of it (passed, attempts)
    is the run's `StoryRecord`, built on this: fields an agent writes for those are ignored."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    id: str = Field(min_length=1, max_length=40)
    title: Title
    description: Text = ""
    acceptance_criteria: list[Criterion] = Field(
        alias="acceptanceCriteria", min_length=1, max_length=MAX_CRITERIA
    )
    priority: StrictInt
    notes: Text = ""
    # Ids of the base commit's failing tests this story must make pass (the worker checks
    # that each exists); the story may add tests of its own besides.
    tests: list[TestId] = Field(default_factory=list, max_length=500)
    # Existing tests the story must change (a behaviour that changes on purpose): made in
    # its tests call, and the story ends "needs review", never silently passed.
    changes_tests: list[ChangedTest] = Field(
        default_factory=list, alias="changesTests", max_length=50
    )

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

    version: Annotated[str, Field(max_length=40), AfterValidator(_one_line)] = PRD_VERSION
    project: Annotated[str, Field(max_length=MAX_TITLE_CHARS), AfterValidator(_one_line)] = ""
    source_req: Annotated[str, Field(max_length=MAX_CRITERION_CHARS), AfterValidator(_text)] = (
        Field(default="", alias="sourceReq")
    )
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
    _check_shape(text)
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
    return prd


def _check_shape(text: str) -> None:
    """Size and nesting, before the parser sees the text."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_PRD_BYTES:
        raise PrdError(
            f"prd.json is {size} bytes; a plan must stay under {MAX_PRD_BYTES} bytes "
            "(keep descriptions and notes short)"
        )
    depth = deepest = 0
    for bracket in NOT_A_BRACKET_RE.sub("", STRING_RE.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    if deepest > MAX_JSON_DEPTH:
        raise PrdError(
            f"prd.json is nested {deepest} levels deep; a plan needs at most {MAX_JSON_DEPTH} "
            "(userStories is a list of flat story objects)"
        )


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
    described = [f"{p.path or 'prd.json'}: {p.message.lower()}" for p in problems(exc)]
    return "prd.json is invalid: " + "; ".join(described)
