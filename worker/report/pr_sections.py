"""The PR body's sections on a story's frozen tests and its blind review, and the escaping of
agent- and user-written text every section of the body shares."""

from __future__ import annotations

from collections.abc import Sequence

from worker.model.control_chars import escape_control
from worker.model.review import ReviewRecord
from worker.model.state import AttemptOutcome, StoryRecord
from worker.report.inert_text import neutralize
from worker.report.story_states import frozen_note


def frozen_tests(stories: Sequence[StoryRecord]) -> str:
    """Per story: the commit its tests were frozen in before its code, or why they were not;
    an existing test it changed on its plan's word is a row of its own."""
    rows = [
        "### Frozen tests",
        "",
        "Each story's tests were written, proven failing without its code and committed before "
        "its code; every check ran on them as committed.",
        "",
        "| Story | Frozen tests | Commit | Note |",
        "| --- | --- | --- | --- |",
    ]
    for s in stories:
        if not s.attempts:
            continue
        frozen, note = s.frozen, cell(frozen_note(s))
        if frozen is None:
            refused = s.attempts[-1].outcome is AttemptOutcome.TESTS_REFUSED
            said = (
                "its tests call froze nothing" if refused else "the story's tests were not frozen"
            )
            rows.append(f"| {cell(s.id)} | {said} | — | {note or '—'} |")
            continue
        tests = ", ".join(f"`{cell(t)}`" for t in frozen.tests) or "no new tests"
        commit = f"`{frozen.commit[:12]}`" if frozen.commit else "—"
        rows.append(f"| {cell(s.id)} | {tests} | {commit} | {note or '—'} |")
        reasons = {c.path: c.reason for c in s.changes_tests}
        for test in frozen.changed_passing:
            why = "; ".join(f"{p}: {r}" for p, r in reasons.items())
            rows.append(
                f"| {cell(s.id)} | changed a passing test: `{cell(test)}` | "
                f"{commit} | {cell(why)}; needs review |"
            )
    if len(rows) == 6:
        return ""
    if all(s.frozen is None for s in stories if s.attempts):
        rows[2] = (
            "The stories' tests were not frozen (`tests: together`): each story's tests were "
            "written in the same agent call as its code."
        )
    return "\n".join(rows)


def review_lines(review: ReviewRecord | None) -> list[str]:
    """The blind review of a change, labelled as what it is: a model's opinion."""
    if review is None:
        return []
    lines = [f"- blind review (a model's opinion): {inline(review.headline())}"]
    lines += [f"  - {inline(line)}" for line in review.finding_lines()]
    lines += [f"- not asked for (review): {inline(extra)}" for extra in review.extra_behaviour]
    return lines


def whole_review(review: ReviewRecord | None) -> str:
    if review is None:
        return ""
    lines = [
        "### The blind review of the whole change",
        "",
        "A model read the change without the requirement and described it; another compared "
        "that description with every story's criteria. Its opinion, not a check: the tests "
        "above are the proof.",
        "",
        *review_lines(review),
    ]
    return "\n".join(lines)


def inline(text: str) -> str:
    # Agent- and user-written text must not close our HTML comment marker or fake a new one,
    # close other issues on merge or ping people.
    text = text.replace("<!--", "&lt;!--").replace("-->", "--&gt;").replace("\n", " ")
    # Nor carry control characters (a file name may hold any): shown escaped.
    return neutralize(escape_control(text)).strip()


def cell(text: str) -> str:
    return inline(text).replace("|", "\\|").replace("`", "'")
