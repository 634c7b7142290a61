"""Failed tests as check-run annotations, on the line where each failed."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from worker.model.gates import GateResult
from worker.model.state import StoryRecord, StoryState
from worker.report.inert_text import neutralize

# GitHub takes at most 50 annotations per request and appends each update's to the check run's;
# reqdrive sends at most this many per check run (one request's worth) and says how many more
# there were, rather than spend more writes of the installation's budget on them.
MAX_ANNOTATIONS = 50
TITLE_CHARS = 255  # GitHub's limit for an annotation's title
MESSAGE_CHARS = 500  # GitHub takes 64 KB; a short reason is what a reader needs


def failure_annotations(gates: Iterable[GateResult]) -> list[dict[str, Any]]:
    """One `failure` annotation per failed test whose file and line are known, in the order
    the gates give them; the same test at the same place once."""
    annotations: dict[str, dict[str, Any]] = {}
    for gate in gates:
        for test_id in gate.failed_tests or []:
            site = gate.failure_sites.get(test_id)
            if site is None:  # no place to show it: the summary lists it
                continue
            annotation = {
                "path": site.path,
                "start_line": site.line,
                "end_line": site.line,
                "annotation_level": "failure",
                "title": _cut(neutralize(test_id), TITLE_CHARS),
                "message": _cut(neutralize(site.message or f"{gate.name} failed"), MESSAGE_CHARS),
            }
            annotations.setdefault(annotation_key(annotation), annotation)
    return list(annotations.values())


def story_failures(stories: Sequence[StoryRecord]) -> list[GateResult]:
    """The gates of each failed story's last attempt: why it failed."""
    return [
        gate
        for story in stories
        if story.state is StoryState.FAILED and story.attempts
        for gate in story.attempts[-1].gates
    ]


def annotation_key(annotation: dict[str, Any]) -> str:
    """What makes an annotation the same one again (GitHub would show a repeat twice)."""
    return f"{annotation['path']}:{annotation['start_line']}:{annotation['title']}"


def left_out_note(count: int) -> str:
    """The summary's line for annotations that were not sent."""
    if count <= 0:
        return ""
    tests = "test" if count == 1 else "tests"
    return (
        f"_{count} more failing {tests} with a known line not annotated: reqdrive annotates "
        f"at most {MAX_ANNOTATIONS} per check run._"
    )


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
