"""prd.json validation messages and the worker's deterministic story selection."""

from __future__ import annotations

import json
from typing import Any

import pytest

from worker.exceptions import PrdError
from worker.model.prd import parse_prd


def story(story_id: str, priority: object = 1, **extra: Any) -> dict[str, Any]:
    return {
        "id": story_id,
        "title": f"Title {story_id}",
        "description": "d",
        "acceptanceCriteria": ["it works"],
        "priority": priority,
        **extra,
    }


ID_ERROR = "userStories[0].id: value error, must be one word of ascii"


def prd_text(stories: list[dict[str, Any]]) -> str:
    return json.dumps({"project": "p", "sourceReq": "REQ-1", "userStories": stories})


def test_a_valid_plan_is_read_without_the_fields_the_worker_owns() -> None:
    prd = parse_prd(prd_text([story("US-001", passes=True, attempts=7), story("US-002", 2)]))
    assert [s.id for s in prd.user_stories] == ["US-001", "US-002"]
    assert all({"passes", "attempts"}.isdisjoint(s) for s in prd.to_json()["userStories"])
    assert prd.to_json()["userStories"][0]["acceptanceCriteria"] == ["it works"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "must be a JSON object"),
        (json.dumps({"project": "p"}), "userStories: field required"),
        (prd_text([]), "userStories has 0 stories; a plan needs 1 to 8"),
        (prd_text([story(f"US-{i}") for i in range(9)]), "has 9 stories"),
        (prd_text([story("US-1"), story("US-1")]), "story id 'US-1' is used more than once"),
        (prd_text([story("US-1", priority="high")]), "userStories[0].priority"),
        (prd_text([story("US-1", priority=1.5)]), "userStories[0].priority"),
        (prd_text([story("US-1", acceptanceCriteria=[])]), "userStories[0].acceptanceCriteria"),
        (prd_text([{**story("US-1"), "title": ""}]), "userStories[0].title"),
        (prd_text([story("US 1")]), ID_ERROR),
        (prd_text([story("US-\u0663")]), ID_ERROR),
        (prd_text([story("US-1\u0000")]), ID_ERROR),
    ],
)
def test_an_invalid_plan_is_refused_with_a_message_naming_what_is_wrong(
    text: str, message: str
) -> None:
    with pytest.raises(PrdError) as caught:
        parse_prd(text)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "title",
            "Export\x00CSV",
            r"userStories\[0\].title: .*control characters \(found '\\x00'\)",
        ),
        ("title", "Export\nCSV", r"userStories\[0\].title: value error, must be one line"),
        ("title", "Export \u202eVSC", r"userStories\[0\].title: .*'\\u202e'"),
        ("id", "US-1\x00", r"userStories\[0\].id"),
        ("acceptanceCriteria", ["ok\x1b[31m"], r"acceptanceCriteria\[0\]: .*'\\x1b'"),
        ("description", "x" * 10_001, r"description: string should have at most 10000"),
        ("notes", "x" * 10_001, r"notes: string should have at most 10000"),
        ("acceptanceCriteria", ["x" * 1_001], r"acceptanceCriteria\[0\]: string should have"),
        ("acceptanceCriteria", ["x"] * 51, r"acceptanceCriteria: list should have at most 50"),
    ],
)
def test_control_characters_and_oversized_fields_are_refused_naming_the_field(
    field: str, value: object, message: str
) -> None:
    with pytest.raises(PrdError, match=message):
        parse_prd(prd_text([{**story("US-1"), field: value}]))


def test_line_breaks_and_tabs_are_fine_where_text_spans_lines() -> None:
    prd = parse_prd(prd_text([story("US-1", description="a\nb\tc", notes="x\r\ny")]))
    assert prd.user_stories[0].description == "a\nb\tc"


def test_a_plan_nested_100000_deep_is_refused_before_parsing() -> None:
    with pytest.raises(PrdError, match="nested 100000 levels deep; a plan needs at most 32"):
        parse_prd("[" * 100_000 + "]" * 100_000)


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = json.dumps({"project": "[[[[{{{{" * 10 + '\\"[', "userStories": [story("US-1")]})
    assert parse_prd(text).project.startswith("[[[[")


def test_a_ten_megabyte_plan_is_refused_naming_the_limit() -> None:
    text = prd_text([story("US-1", description="x" * 10_000_000)])
    with pytest.raises(PrdError, match=r"prd.json is \d+ bytes; a plan must stay under 1048576"):
        parse_prd(text)


def test_a_story_names_the_existing_tests_it_must_change_each_with_a_reason() -> None:
    changes = [{"path": "tests/test_api.py", "reason": "the status code changes to 201"}]
    prd = parse_prd(prd_text([story("US-001", changesTests=changes)]))
    [change] = prd.user_stories[0].changes_tests
    assert (change.path, change.reason) == ("tests/test_api.py", "the status code changes to 201")
    assert prd.to_json()["userStories"][0]["changesTests"] == changes
    assert parse_prd(prd_text([story("US-001")])).user_stories[0].changes_tests == []


@pytest.mark.parametrize(
    "change",
    [
        {"path": "tests/test_api.py"},
        {"path": "tests/test_api.py", "reason": ""},
        {"path": "../outside.py", "reason": "x"},
        {"path": "/etc/passwd", "reason": "x"},
        {"path": "tests/*.py", "reason": "x"},
        {"path": "tests/test_api.py", "reason": "x", "extra": 1},
    ],
)
def test_a_change_to_existing_tests_without_a_file_or_a_reason_is_refused(
    change: dict[str, Any],
) -> None:
    with pytest.raises(PrdError, match="changesTests"):
        parse_prd(prd_text([story("US-001", changesTests=[change])]))
