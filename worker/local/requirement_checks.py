"""What `validate` holds a requirement file to: real text, acceptance criteria, a name that runs.

The acceptance-criteria rule, as the messages and docs/configuration.md say it: a heading
(any level) that starts with "Done when" or "Acceptance criteria", followed before the next
heading by at least one list item (`- `, `* `, `+ ` or `1. `). The plan turns those items into
the stories' criteria, and the blind review checks the branch against them.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from worker.local.init_repo import EXAMPLE_REQUIREMENT
from worker.model.requirement_files import REQUIREMENT_NAMES

# The `<...>` lines of init's template: a requirement still holding one was never written.
TEMPLATE_PLACEHOLDERS = tuple(re.findall(r"<[^<>\n]+>", EXAMPLE_REQUIREMENT))
HEADING_RE = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
CRITERIA_HEADING_RE = re.compile(r"^(done when|acceptance criteria)\b", re.IGNORECASE)
LIST_ITEM_RE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\S")
# A file meant as a requirement, whatever its case, separator or extension: req-4, REQ_4, REQ4.
MEANT_AS_REQUIREMENT_RE = re.compile(r"\Areq(?:-|_|\s)*\d|\AREQ-", re.IGNORECASE)
NUMBER_RE = re.compile(r"\AREQ-(\d+)")
NEAR_NAME_RE = re.compile(r"\Areq(?:-|_|\s)*(\d+)(.*)\Z", re.IGNORECASE | re.DOTALL)
CRITERIA_RULE = (
    "add a '## Done when' (or '## Acceptance criteria') section with at least one '- ' item, "
    "each a check a reviewer or a test can make"
)


def content_problem(text: str) -> str | None:
    """Why the requirement's text cannot be planned well yet, or None."""
    left = [p for p in TEMPLATE_PLACEHOLDERS if p in text]
    if left:
        return (
            f"still holds reqdrive init's template text ({left[0]}): write the requirement "
            "over it, or delete the file"
        )
    if not has_acceptance_criteria(text):
        return f"has no acceptance criteria: {CRITERIA_RULE}"
    return None


def has_acceptance_criteria(text: str) -> bool:
    """Whether a "Done when" or "Acceptance criteria" heading has a list item under it."""
    in_section = False
    for line in text.splitlines():
        heading = HEADING_RE.match(line)
        if heading:
            in_section = CRITERIA_HEADING_RE.match(heading[1]) is not None
        elif in_section and LIST_ITEM_RE.match(line):
            return True
    return False


def requirement_number(name: str) -> int | None:
    """The number a requirement's file name gives it (`REQ-007-x.md` → 7), if any."""
    match = NUMBER_RE.match(PurePosixPath(name).name)
    return int(match[1]) if match else None


def meant_as_requirement(name: str) -> bool:
    """Whether a file name looks like a requirement's though the name rule may not match it."""
    return MEANT_AS_REQUIREMENT_RE.match(PurePosixPath(name).name) is not None


def never_runs(path: str, folder: str) -> str:
    """The message for a file meant as a requirement that the name rule never matches."""
    name = PurePosixPath(path).name
    target = (PurePosixPath(folder) / matching_name(name)).as_posix()
    rule = f"a run reads only {REQUIREMENT_NAMES} directly in {folder}/"
    if PurePosixPath(path).parent != PurePosixPath(folder):
        return (
            f"will never run ({rule}): move it to {target}, or rename it without REQ to keep "
            "it as a draft"
        )
    return f"will never run ({rule}): rename it to {target}"


def matching_name(name: str) -> str:
    """The name the rule matches that is closest to `name`: `req_4-x.txt` → `REQ-4-x.md`."""
    stem = PurePosixPath(name).stem if "." in name else name
    stem = stem.removesuffix(".md")
    near = NEAR_NAME_RE.match(stem)
    if near:
        return f"REQ-{near[1]}{near[2]}.md"
    return f"REQ-{stem[4:]}.md"
