"""Stories added after the plan: review feedback (FB-001…), a CI failure's evidence (CI-001…)."""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

FEEDBACK_PREFIX = "FB"
FEEDBACK_ID_RE = re.compile(r"\AFB-(?P<number>[0-9]{3,6})\Z")
# What one story carries of a person's words: a thread of 30 comments of a few KiB each is
# already more than any fix needs; a diff hunk is cut from the top (its last lines are the
# ones commented on).
MAX_COMMENTS = 30
MAX_COMMENT_CHARS = 4_000
MAX_HUNK_CHARS = 6_000
# The element the prompt wraps a person's words in; the words themselves never close it.
QUOTE_TAG = "review-comment"


class AddedBy(StrEnum):
    """What added a story to a pull request's run after its plan. Such a story may come
    without a test (a comment that changes no behaviour, a CI failure not reproduced here),
    and without one it cannot be shown done (worker/verdict/story_verdict.py)."""

    REVIEW = "review feedback"  # FB-: a review thread, a review's body, `/reqdrive fix`
    CI = "red CI"  # CI-: the repository's CI failed on the branch


class SourceKind(StrEnum):
    """Where a feedback story came from, which decides how it is answered."""

    THREAD = "review thread"  # a reply in the thread, resolved when the story passed
    REVIEW = "review"  # the body of a review: answered on the pull request
    COMMENT = "comment"  # `/reqdrive fix text` on the pull request: answered there


class FeedbackComment(BaseModel):
    """One comment of a thread (or the review's body) as the agent is shown it: user text."""

    model_config = ConfigDict(frozen=True)

    author: str = Field(max_length=100)
    body: str = Field(max_length=MAX_COMMENT_CHARS)


class StorySource(BaseModel):
    """What a story added after the plan answers: the worker's record, never the agent's.

    Kept on the run's StoryRecord (not on the plan's Story an agent writes), so nothing in a
    prd.json can make the bot reply to, or resolve, a thread of its choosing.
    """

    model_config = ConfigDict(frozen=True)

    kind: SourceKind
    # What makes this feedback new: the thread with its latest comment by a person, the
    # review, or the comment. A key some story already has is never added again.
    key: str = Field(max_length=300)
    thread_id: str | None = None  # the thread's GraphQL node id (resolveReviewThread)
    reply_to: int | None = None  # the comment the answer replies to (REST id)
    path: str | None = None
    line: int | None = None
    start_line: int | None = None
    outdated: bool = False  # the lines changed since (or the file went): line is the original
    diff_hunk: str = ""
    comments: list[FeedbackComment] = Field(default_factory=list)
    url: str = ""

    @property
    def lines(self) -> str:
        """ "src/app.py lines 3-7", "src/app.py line 7", or the path alone."""
        if self.path is None:
            return ""
        was = " (outdated: as it was when commented)" if self.outdated else ""
        if self.start_line and self.line and self.start_line != self.line:
            return f"{self.path} lines {self.start_line}-{self.line}{was}"
        return f"{self.path} line {self.line}{was}" if self.line else f"{self.path}{was}"


def feedback_id(number: int) -> str:
    return f"{FEEDBACK_PREFIX}-{number:03d}"


def next_feedback_number(story_ids: list[str]) -> int:
    """The number of the next FB- story: one more than the highest, never reused."""
    numbers = [int(m["number"]) for i in story_ids if (m := FEEDBACK_ID_RE.match(i))]
    return max(numbers, default=0) + 1


def quoted(text: str) -> str:
    """A person's text as a prompt quotes it: inside <review-comment> markers it cannot close
    or open (every `<` of such a tag gets a zero-width joiner), control characters dropped."""
    text = "".join(ch for ch in text if ch in "\n\t" or ch.isprintable())
    return re.sub(rf"<(\s*/?\s*{QUOTE_TAG})", "<\u200d\\1", text, flags=re.IGNORECASE)


def cut_hunk(hunk: str) -> str:
    """A diff hunk cut to its last lines (the ones a comment is on)."""
    if len(hunk) <= MAX_HUNK_CHARS:
        return hunk
    return "…\n" + hunk[-MAX_HUNK_CHARS:].split("\n", 1)[-1]


def cut_comment(body: str) -> str:
    if len(body) <= MAX_COMMENT_CHARS:
        return body
    return body[: MAX_COMMENT_CHARS - 20] + " … (cut)"


def prompt_view(source: StorySource | None) -> dict[str, object] | None:
    """What the story prompts show of the feedback (`story.review`), every person's word
    quoted; None for a planned story."""
    if source is None:
        return None
    where = {
        SourceKind.THREAD: f"A review thread on `{source.lines}`.",
        SourceKind.REVIEW: "The body of a review of this pull request.",
        SourceKind.COMMENT: "A `/reqdrive fix` comment on this pull request.",
    }[source.kind]
    return {
        "kind": str(source.kind),
        "where": where,
        "path": source.path or "",
        "lines": source.lines,
        "diff_hunk": quoted(source.diff_hunk),
        "comments": [
            {"author": quoted(c.author).replace('"', "'"), "body": quoted(c.body)}
            for c in source.comments
        ],
    }


class CiCheck(BaseModel):
    """A CI-fix story's evidence: the repository's CI failed on the branch, and the worker
    runs the tests its logs named where its own checks can run them."""

    checks: list[str] = Field(default_factory=list)  # the failing checks' names, as CI gave them
    candidates: list[str] = Field(default_factory=list)  # test ids the CI logs named as failing
    # The candidates the worker's checks failed too at the story's start (its fail→pass
    # tests); None: not tried yet. Empty: not reproduced here, the next CI result judges it.
    reproduced: list[str] | None = None
