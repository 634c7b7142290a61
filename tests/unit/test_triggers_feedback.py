"""Feedback triggers: which reviews and line comments on a reqdrive PR start a feedback run."""

from __future__ import annotations

import json

import pytest

from bot.github.review_threads import ReviewThread, ThreadComment
from bot.jobs.feedback_stories import addressed
from bot.requests import JobKind, RunRequest
from bot.web.triggers import TriggerContext
from tests.support import webhooks
from tests.unit.test_triggers import CTX, triggers

BOT = ("reqdrive[bot]", "Bot")
OTHER_APP = ("dependabot[bot]", "Bot")


def test_a_review_requesting_changes_on_a_reqdrive_pr_is_a_feedback_run() -> None:
    [request] = triggers("pull_request_review", webhooks.review("changes_requested"))
    assert request == RunRequest(
        kind=JobKind.FEEDBACK,
        delivery_id="d-1",
        repo="Codertocat/Hello-World",
        installation_id=1,
        sender="Codertocat",
        issue_number=2,
        review_id=237895671,
    )


@pytest.mark.parametrize(
    "body",
    ["@reqdrive please rename `x`", "Thanks @ReqDrive[bot], one more thing", "/reqdrive fix"],
)
def test_a_commented_review_that_mentions_the_app_or_asks_a_fix_is_one(body: str) -> None:
    [request] = triggers("pull_request_review", webhooks.review("commented", body))
    assert request.kind is JobKind.FEEDBACK and request.review_id == 237895671


@pytest.mark.parametrize(
    "body",
    [
        None,
        "Looks good to me",
        "cc @reqdrive-team",  # another name that starts the same
        "> @reqdrive said something\n\nI agree",  # quoted
        "```\n@reqdrive\n```",  # in code
        "mail reviewer@reqdrive",  # an address, not a mention
    ],
)
def test_a_commented_review_without_mention_or_fix_is_none(body: str | None) -> None:
    assert triggers("pull_request_review", webhooks.review("commented", body)) == []


def test_an_approval_without_mention_is_none_and_with_one_is_a_run() -> None:
    assert triggers("pull_request_review", webhooks.review("approved", "LGTM")) == []
    assert triggers("pull_request_review", webhooks.review("approved", "LGTM @reqdrive, rename x"))


def test_without_the_apps_slug_only_changes_requested_and_fix_count() -> None:
    ctx = TriggerContext(app_slug=None)
    assert triggers("pull_request_review", webhooks.review("commented", "@reqdrive x"), ctx) == []
    assert triggers("pull_request_review", webhooks.review("changes_requested"), ctx)
    assert triggers("pull_request_review", webhooks.review("commented", "/reqdrive fix"), ctx)


@pytest.mark.parametrize("who", [BOT, OTHER_APP])
def test_reviews_by_the_app_itself_or_other_bots_never_trigger(who: tuple[str, str]) -> None:
    assert triggers("pull_request_review", webhooks.review("changes_requested", user=who)) == []
    body = webhooks.review("changes_requested", user=("Codertocat", "User"), sender=who)
    assert triggers("pull_request_review", body) == []


def test_a_review_on_a_pull_request_reqdrive_did_not_open_is_none() -> None:
    other = webhooks.review("changes_requested", branch="feature/x")
    assert triggers("pull_request_review", other) == []


def test_a_line_comment_mentioning_the_app_or_asking_a_fix_is_a_feedback_run() -> None:
    [request] = triggers("pull_request_review_comment", webhooks.review_comment("@reqdrive why?"))
    assert request.kind is JobKind.FEEDBACK
    assert request.review_comment_id == 284312630 and request.comment_id is None
    assert request.issue_number == 2
    fix = webhooks.review_comment("/reqdrive fix use a constant here")
    assert triggers("pull_request_review_comment", fix)


def test_a_plain_line_comment_a_bots_or_one_on_another_branch_is_none() -> None:
    assert triggers("pull_request_review_comment", webhooks.review_comment("Nice.")) == []
    by_bot = webhooks.review_comment("@reqdrive fix it", user=OTHER_APP)
    assert triggers("pull_request_review_comment", by_bot) == []
    own = webhooks.review_comment("/reqdrive fix", user=BOT)
    assert triggers("pull_request_review_comment", own) == []
    elsewhere = webhooks.review_comment("@reqdrive fix", branch="main")
    assert triggers("pull_request_review_comment", elsewhere) == []


def test_reqdrive_fix_in_a_pr_comment_is_a_feedback_job_and_a_bots_is_not() -> None:
    body = webhooks.comment("/reqdrive fix the empty-title case\nmore words", on_pull_request=True)
    [request] = triggers("issue_comment", body)
    assert request.kind is JobKind.FEEDBACK and request.requirement is None
    bots = webhooks.comment("/reqdrive fix", on_pull_request=True, user=OTHER_APP)
    assert triggers("issue_comment", bots) == []


def test_the_ctx_the_tests_use_knows_the_apps_slug() -> None:
    assert CTX.app_slug == "reqdrive"


def test_a_reply_in_a_thread_naming_no_one_is_left_for_the_job_to_judge() -> None:
    """ "still wrong" answering reqdrive's reply: only the job can read the thread."""
    payload = json.loads(webhooks.review_comment("still wrong"))
    assert triggers("pull_request_review_comment", json.dumps(payload).encode()) == []
    payload["comment"]["in_reply_to_id"] = 426899381
    webhooks.validate("pull_request_review_comment", payload)
    [request] = triggers("pull_request_review_comment", json.dumps(payload).encode())
    assert request.kind is JobKind.FEEDBACK and request.review_comment_id == 284312630


def test_the_job_takes_a_reply_only_where_reqdrive_spoke_before_it_or_when_it_is_asked() -> None:
    def said(cid: int, who: str, body: str, bot: bool = False) -> ThreadComment:
        return ThreadComment(id=cid, author=who, is_bot=bot, body=body)

    answered = ReviewThread("T1", False, "a.py", 3, None, [
        said(1, "alice", "rename x"), said(2, "reqdrive[bot]", "❌ did not pass", True),
        said(3, "alice", "still wrong"),
    ])  # fmt: skip
    people = ReviewThread("T2", False, "a.py", 4, None, [
        said(4, "alice", "why?"), said(5, "bob", "because"), said(6, "carol", "@reqdrive do it"),
        said(7, "dave", "ok", False),
    ])  # fmt: skip
    other_bot = ReviewThread("T3", False, "a.py", 5, None, [
        said(8, "alice", "x"), said(9, "linter[bot]", "style", True), said(10, "alice", "meh"),
    ])  # fmt: skip
    threads = [answered, people, other_bot]
    assert addressed(threads, 3, "reqdrive")
    assert not addressed(threads, 5, "reqdrive")  # two people talking
    assert addressed(threads, 6, "reqdrive") and not addressed(threads, 7, "reqdrive")
    assert not addressed(threads, 10, "reqdrive")  # another App spoke, not reqdrive
    assert not addressed(threads, 99, "reqdrive")  # deleted since
    assert addressed(threads, 10, None)  # no slug configured: any App's reply may be ours


@pytest.mark.parametrize(
    ("event", "name"),
    [
        ("pull_request_review_comment", "edited"),
        ("pull_request_review", "dismissed"),
    ],
)
def test_an_edited_comment_or_a_dismissed_review_starts_nothing(event: str, name: str) -> None:
    """An edit of a comment a run took is not a new request (the reviewer replies for that),
    and a dismissed review asks nothing: neither may loop a run on the same words."""
    example = "created.payload.json" if "comment" in event else "submitted.payload.json"
    payload = webhooks.example(event, example)
    payload["action"] = name  # the fields triggers read are the same in GitHub's examples
    payload["pull_request"]["head"]["ref"] = "reqdrive/issue-1-feature"
    payload.setdefault("installation", dict(webhooks.INSTALLATION))
    for said in (payload.get("comment"), payload.get("review")):
        if said is not None:
            said["body"] = "@reqdrive /reqdrive fix it"
    assert triggers(event, json.dumps(payload).encode()) == []
