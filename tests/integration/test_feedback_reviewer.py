"""What real reviewers write on a reqdrive PR, delivered signed through the web app's intake and
run by the feedback job against the GitHub double with the scripted agent."""

# ruff: noqa: F811 - `scene` is test_jobs' fixture, imported for pytest and taken by name

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from bot.jobs import runtime
from bot.ops.settings import load_settings
from bot.web.asgi import create_asgi_app
from tests.integration.test_jobs import (
    QUEUE,
    REPO,
    Scene,
    scene,  # noqa: F401 - the fixture, used by name
)
from tests.integration.test_jobs_feedback import feature, open_pull, stories_of
from tests.support import webhooks
from tests.support.asgi_client import AsgiClient
from tests.support.github_reviews import add_review, replies_in, resolved
from worker.model.state import StoryState


@pytest.fixture
def web(scene: Scene, redis_url: str) -> AsgiClient:
    """The web app beside the scene's worker, both knowing the App's slug as a deployment's
    web and worker processes do (one environment)."""
    rt = runtime.current()
    settings = rt.settings.model_copy(update={"reqdrive_app_slug": "reqdrive"})
    runtime.configure(settings, scene.conn, sleep=scene.sleeps.append)
    return _web(redis_url)


def _web(redis_url: str) -> AsgiClient:
    settings = load_settings(
        github_webhook_secret=webhooks.SECRET,
        redis_url=redis_url,
        reqdrive_queue=QUEUE,
        reqdrive_app_slug="reqdrive",
    )
    return AsgiClient(create_asgi_app(settings))


def deliver(web: AsgiClient, event: str, payload: dict[str, Any], delivery: str = "") -> int:
    """POST one signed delivery, checked against GitHub's schema first; its status code."""
    webhooks.validate(event, payload)
    body = json.dumps(payload).encode()
    headers = webhooks.headers(event, body, delivery_id=delivery or None)
    return int(web.post("/webhook", data=body, headers=headers).status_code)


def _on_pull(payload: dict[str, Any], pull: dict[str, Any], login: str) -> dict[str, Any]:
    payload["repository"]["full_name"] = REPO
    payload["repository"]["name"] = REPO.split("/")[1]
    payload["installation"] = {"id": 7, "node_id": "MDIz"}
    payload["sender"]["login"], payload["sender"]["type"] = login, "User"
    payload["pull_request"]["number"] = pull["number"]
    payload["pull_request"]["head"]["ref"] = pull["head"]["ref"]
    return payload


def review_delivery(
    pull: dict[str, Any], review_id: int, login: str, state: str, body: str | None
) -> dict[str, Any]:
    payload = copy.deepcopy(webhooks.example("pull_request_review", "submitted.payload.json"))
    _on_pull(payload, pull, login)
    payload["review"].update({"id": review_id, "body": body, "state": state})
    payload["review"]["user"]["login"], payload["review"]["user"]["type"] = login, "User"
    return payload


def line_comment_delivery(
    pull: dict[str, Any], comment_id: int, login: str, body: str, *, reply_to: int | None = None
) -> dict[str, Any]:
    payload = copy.deepcopy(webhooks.example("pull_request_review_comment", "created.payload.json"))
    _on_pull(payload, pull, login)
    payload["comment"].update({"id": comment_id, "body": body})
    if reply_to is not None:
        payload["comment"]["in_reply_to_id"] = reply_to
    payload["comment"]["user"]["login"], payload["comment"]["user"]["type"] = login, "User"
    return payload


def issue_comment_delivery(
    number: int, login: str, body: str, *, on_pull: bool = True
) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(
        webhooks.comment(body, on_pull_request=on_pull, user=(login, "User"))
    )
    payload["repository"]["full_name"] = REPO
    payload["installation"] = {"id": 7, "node_id": "MDIz"}
    payload["sender"]["login"] = login
    payload["issue"]["number"] = number
    payload["comment"]["id"] = 900_000 + number
    return payload


def bodies(scene: Scene, number: int) -> list[str]:
    return [c["body"] for c in scene.gh.comments_on(REPO, number)]


def test_a_review_with_only_a_body_asking_changes_is_one_story_answered_on_the_pull(
    scene: Scene, web: AsgiClient
) -> None:
    pull = open_pull(scene)
    review_id, _ = add_review(scene.gh, REPO, pull["number"], "alice", "CHANGES_REQUESTED",
                              "Add fb_one, worth 7.")  # fmt: skip
    scene.scenario({"stories": {"FB-001": [feature("fb_one", 7)]}})
    payload = review_delivery(pull, review_id, "alice", "changes_requested", "Add fb_one, worth 7.")

    assert deliver(web, "pull_request_review", payload) == 202
    scene.work()

    assert stories_of(scene)["FB-001"] is StoryState.PASSED
    assert any("**`FB-001` passed**" in b for b in bodies(scene, pull["number"]))


def test_the_same_review_delivered_twice_is_one_run(scene: Scene, web: AsgiClient) -> None:
    pull = open_pull(scene)
    review_id, _ = add_review(scene.gh, REPO, pull["number"], "alice", "CHANGES_REQUESTED",
                              "Add fb_one, worth 7.")  # fmt: skip
    scene.scenario({"stories": {"FB-001": [feature("fb_one", 7)]}})
    payload = review_delivery(pull, review_id, "alice", "changes_requested", "Add fb_one, worth 7.")
    calls_before = scene.project.calls()

    assert deliver(web, "pull_request_review", payload, "same-delivery") == 202
    deliver(web, "pull_request_review", payload, "same-delivery")  # GitHub's redelivery
    deliver(web, "pull_request_review", payload, "another-delivery")  # a manual redeliver
    scene.work()

    assert scene.project.calls()[len(calls_before) :] == ["FB-001 1 tests", "FB-001 1"]
    assert list(stories_of(scene)) == ["US-001", "FB-001"]


def test_a_bare_fix_with_nothing_waiting_says_so_and_how_to_ask(
    scene: Scene, web: AsgiClient
) -> None:
    pull = open_pull(scene)
    number = pull["number"]
    calls_before = scene.project.calls()

    payload = issue_comment_delivery(number, "alice", "/reqdrive fix")
    assert deliver(web, "issue_comment", payload) == 202
    scene.work()

    assert scene.project.calls() == calls_before
    [answer] = [b for b in bodies(scene, number) if "Nothing to fix" in b]
    assert "`/reqdrive fix <what to change>`" in answer


def test_a_reviewer_without_the_permission_is_refused_once_not_per_thread(
    scene: Scene, web: AsgiClient
) -> None:
    pull = open_pull(scene)
    number = pull["number"]
    scene.gh.set_role(REPO, "mallory", "read")
    review_id, threads = add_review(scene.gh, REPO, number, "mallory", "COMMENTED",
        "@reqdrive please fix these", [
            {"path": "feature_1.py", "line": n, "body": f"@reqdrive fix line {n}"}
            for n in (1, 2, 3)
        ])  # fmt: skip
    calls_before = scene.project.calls()

    asked = review_delivery(pull, review_id, "mallory", "commented", "@reqdrive please fix these")
    deliver(web, "pull_request_review", asked)
    for n, thread in enumerate(threads, start=1):
        cid = scene.gh.threads[thread]["_comments"][0]["id"]
        deliver(web, "pull_request_review_comment",
                line_comment_delivery(pull, cid, "mallory", f"@reqdrive fix line {n}"))  # fmt: skip
    scene.work()

    assert scene.project.calls() == calls_before
    refusals = [b for b in bodies(scene, number) if "runs only for people with" in b]
    assert len(refusals) == 1 and "@mallory" in refusals[0]


def test_more_threads_than_one_run_takes_are_said_on_the_pull_and_taken_by_the_next_run(
    scene: Scene, web: AsgiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cap is 10; at 1 the same path runs with two threads instead of twelve.
    monkeypatch.setattr("bot.jobs.feedback_stories.MAX_FEEDBACK_STORIES", 1)
    monkeypatch.setattr("bot.jobs.feedback.MAX_FEEDBACK_STORIES", 1)
    pull = open_pull(scene)
    number = pull["number"]
    review_id, (one, two) = add_review(scene.gh, REPO, number, "alice", "CHANGES_REQUESTED", "", [
        {"path": "feature_1.py", "line": 2, "body": "Add fb_one, worth 7."},
        {"path": "feature_1.py", "line": 1, "body": "And fb_two, also 7."},
    ])  # fmt: skip
    scene.scenario(
        {"stories": {"FB-001": [feature("fb_one", 7)], "FB-002": [feature("fb_two", 7)]}}
    )

    payload = review_delivery(pull, review_id, "alice", "changes_requested", None)
    assert deliver(web, "pull_request_review", payload) == 202
    scene.work()  # the run, then the feedback run it queued for what it left

    [said] = [b for b in bodies(scene, number) if "more wait" in b]
    assert "takes 1 of the review's requests; 1 more wait" in said
    assert stories_of(scene) == {
        "US-001": StoryState.PASSED,
        "FB-001": StoryState.PASSED,
        "FB-002": StoryState.PASSED,
    }
    assert resolved(scene.gh, one) and resolved(scene.gh, two)
    assert len(replies_in(scene.gh, one)) == len(replies_in(scene.gh, two)) == 1


def test_an_approval_that_mentions_the_app_asking_a_change_is_taken(
    scene: Scene, web: AsgiClient
) -> None:
    pull = open_pull(scene)
    text = "LGTM! @reqdrive but add fb_one, worth 7."
    review_id, _ = add_review(scene.gh, REPO, pull["number"], "alice", "APPROVED", text)
    scene.scenario({"stories": {"FB-001": [feature("fb_one", 7)]}})

    approved = review_delivery(pull, review_id, "alice", "approved", text)
    assert deliver(web, "pull_request_review", approved) == 202
    scene.work()

    assert stories_of(scene)["FB-001"] is StoryState.PASSED
