"""Red CI's triggers: which check_suite, workflow_run and push deliveries start which jobs,
from GitHub's own example payloads."""

from __future__ import annotations

from typing import Any

from bot.requests import JobKind, RunRequest
from bot.web.enqueue import job_id_for
from bot.web.events import Event, Payload
from bot.web.triggers import TriggerContext, triggers_for
from tests.support import webhooks

APP_ID = 4242
CTX = TriggerContext(trigger_label="reqdrive", app_slug="reqdrive", app_id=APP_ID)
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
BRANCH = "reqdrive/cart-totals"


def triggers(name: str, body: bytes, ctx: TriggerContext = CTX) -> list[RunRequest]:
    event = Event(name=name, delivery_id="d-1", payload=Payload.model_validate_json(body))
    return triggers_for(event, ctx)


def workflow_run(conclusion: str = "failure", **change: Any) -> bytes:
    def edit(payload: dict[str, Any]) -> None:
        run = payload["workflow_run"]
        run.update(conclusion=conclusion, head_sha=HEAD, head_branch=BRANCH, id=77)
        run["pull_requests"][0]["head"].update(ref=BRANCH, sha=HEAD)
        for key, value in change.items():
            if key == "pull_head":
                run["pull_requests"][0]["head"].update(value)
            else:
                run[key] = value

    return webhooks.variant("workflow_run", "completed.3.payload.json", edit)


def check_suite(conclusion: str = "failure", app: dict[str, Any] | None = None) -> bytes:
    def edit(payload: dict[str, Any]) -> None:
        suite = payload["check_suite"]
        suite.update(conclusion=conclusion, head_sha=HEAD, head_branch=BRANCH, id=88)
        suite["pull_requests"][0]["head"].update(ref=BRANCH, sha=HEAD)
        suite["app"].update(app or {"id": 29310, "slug": "octocoders-linter"})

    return webhooks.variant("check_suite", "completed.payload.json", edit)


def test_a_failed_workflow_run_on_a_reqdrive_pull_requests_head_asks_for_a_ci_fix() -> None:
    [request] = triggers("workflow_run", workflow_run())
    assert request == RunRequest(
        kind=JobKind.CI_FIX,
        delivery_id="d-1",
        repo="octo-org/octo-repo",
        installation_id=None,
        sender="Codertocat",
        issue_number=2,
        branch=BRANCH,
        head_sha=HEAD,
        workflow_run_id=77,
        conclusion="failure",
    )


def test_another_apps_failed_check_suite_asks_for_a_ci_fix_and_timed_out_counts() -> None:
    [request] = triggers("check_suite", check_suite("timed_out"))
    assert (request.kind, request.check_suite_id, request.issue_number) == (JobKind.CI_FIX, 88, 2)


def test_a_success_is_only_told_to_the_job_which_says_green_once_after_a_fix() -> None:
    [request] = triggers("workflow_run", workflow_run("success"))
    assert request.conclusion == "success"


def test_cancelled_neutral_or_skipped_ci_starts_nothing() -> None:
    for conclusion in ("cancelled", "neutral", "skipped", "action_required"):
        assert triggers("workflow_run", workflow_run(conclusion)) == []


def test_ci_on_another_pull_request_starts_nothing() -> None:
    other = workflow_run(pull_head={"ref": "feature/login"}, head_branch="feature/login")
    assert triggers("workflow_run", other) == []


def test_a_workflow_run_naming_no_pull_request_starts_nothing() -> None:
    assert triggers("workflow_run", workflow_run(pull_requests=[])) == []


def test_ci_on_a_commit_that_is_no_longer_the_pull_requests_head_starts_nothing() -> None:
    moved_on = workflow_run(pull_head={"sha": "1" * 40})
    assert triggers("workflow_run", moved_on) == []


def test_reqdrives_own_check_suite_starts_nothing_by_id_or_by_slug() -> None:
    assert triggers("check_suite", check_suite(app={"id": APP_ID, "slug": "renamed"})) == []
    assert triggers("check_suite", check_suite(app={"id": 1, "slug": "reqdrive"})) == []
    assert triggers("check_suite", check_suite(app={"id": 1, "slug": "other"})) != []


def test_github_actions_check_suite_is_left_to_its_workflow_run() -> None:
    actions = check_suite(app={"id": 15368, "slug": "github-actions"})
    assert triggers("check_suite", actions) == []


def test_a_persons_push_to_a_reqdrive_branch_hands_its_pull_request_off() -> None:
    body = webhooks.push_of([(["src/cart.py"], [], [])], ref=f"refs/heads/{BRANCH}")
    [request] = triggers("push", body)
    assert (request.kind, request.branch) == (JobKind.HANDOFF, BRANCH)
    assert request.head_sha is not None


def test_reqdrives_own_push_or_another_bots_hands_nothing_off() -> None:
    for login in ("reqdrive[bot]", "dependabot[bot]"):
        body = webhooks.push_of(
            [(["src/cart.py"], [], [])], ref=f"refs/heads/{BRANCH}", sender=(login, "Bot")
        )
        assert triggers("push", body) == []


def test_each_ci_result_and_each_push_is_a_job_of_its_own() -> None:
    [failed] = triggers("workflow_run", workflow_run())
    [again] = triggers("workflow_run", workflow_run(id=78))
    [suite] = triggers("check_suite", check_suite())
    ids = {job_id_for(r) for r in (failed, again, suite)}
    assert len(ids) == 3
    assert all(i.startswith("ci_fix-pr-2-") for i in ids)
