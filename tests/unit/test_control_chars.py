"""One rule for control characters: C0, DEL and C1 are escaped in what we show, refused in paths."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.support.run_results import result, story
from worker.model.control_chars import escape_control, has_control
from worker.model.gates import FailureSite
from worker.model.state import StoryState
from worker.report.pr_body import render_pr_body

# An OSC title, a CSI clear screen in its 8-bit form, a bell, DEL and NEL (U+0085).
HOSTILE = "a\x1b]0;owned\x07\x9b2J\x7f\x85b"


def test_every_control_is_shown_escaped_and_the_text_stays_readable() -> None:
    assert escape_control(HOSTILE) == "a\\x1b]0;owned\\x07\\x9b2J\\x7f\\x85b"
    assert escape_control("tab\there\nnewline") == "tab\\x09here\\x0anewline"
    assert escape_control("Café, naïve — ✅ ünïcode") == "Café, naïve — ✅ ünïcode"


@pytest.mark.parametrize("char", ["\x00", "\x1b", "\x7f", "\x9b", "\x9d"])
def test_c0_del_and_c1_count_as_control(char: str) -> None:
    assert has_control(f"src/a{char}.py")
    assert not has_control("src/a\u00a0b.py")  # U+00A0 is a space, printed, not obeyed


def test_the_pr_body_shows_a_c1_sequence_escaped() -> None:
    hostile = story("US-001", StoryState.PASSED).model_copy(update={"title": HOSTILE})
    body = render_pr_body(result(stories=[hostile]))
    assert "\x9b" not in body and "\x85" not in body
    assert "a\\x1b]0;owned\\x07\\x9b2J\\x7f\\x85b" in body


def test_a_failure_site_path_with_a_c1_control_is_refused() -> None:
    with pytest.raises(ValidationError):
        FailureSite(path="src/a\x9b2J.py", line=1)
