"""Trigger rules: which deliveries start which jobs, from real example payloads."""

from __future__ import annotations

from typing import Any

import pytest

from bot.requests import JobKind, RunRequest
from bot.web.events import Event, Payload
from bot.web.triggers import PUSH_COMMITS_CAP, TriggerContext, triggers_for
from tests.support import webhooks

CTX = TriggerContext(trigger_label="reqdrive", app_slug="reqdrive")
REQ = "docs/requirements/REQ-001-login.md"


def event(name: str, body: bytes, delivery_id: str = "d-1") -> Event:
    return Event(name=name, delivery_id=delivery_id, payload=Payload.model_validate_json(body))


def triggers(name: str, body: bytes, ctx: TriggerContext = CTX) -> list[RunRequest]:
    return triggers_for(event(name, body), ctx)


# issues.labeled


def test_the_trigger_label_on_an_issue_runs_the_issue() -> None:
    [request] = triggers("issues", webhooks.labeled("reqdrive", number=42))
    assert request == RunRequest(
        kind=JobKind.RUN,
        delivery_id="d-1",
        repo="Codertocat/Hello-World",
        installation_id=1,
        sender="Codertocat",
        requirement="ISSUE-42",
        issue_number=42,
    )


def test_the_label_comes_from_settings_and_matches_as_github_does_case_insensitively() -> None:
    ctx = TriggerContext(trigger_label="Build-Me")
    assert triggers("issues", webhooks.labeled("build-me"), ctx)
    assert not triggers("issues", webhooks.labeled("reqdrive"), ctx)


def test_another_label_or_another_issue_action_does_nothing() -> None:
    assert not triggers("issues", webhooks.example_bytes("issues", "labeled.payload.json"))
    assert not triggers("issues", webhooks.example_bytes("issues", "opened.payload.json"))
    unlabeled = webhooks.variant(
        "issues", "unlabeled.payload.json", lambda p: p["label"].update(name="reqdrive")
    )
    assert not triggers("issues", unlabeled)


# push


def test_a_requirement_added_on_the_default_branch_runs_it_at_the_pushed_commit() -> None:
    [request] = triggers("push", webhooks.push_of([([REQ], [], [])]))
    assert request.requirement == REQ
    assert request.kind is JobKind.RUN
    assert request.head_sha == "6113728f27ae82c7b1a177c8d03f9e96e0adf246"
    assert request.installation_id == 1


def test_each_added_or_modified_requirement_runs_once_across_commits() -> None:
    other = "docs/requirements/REQ-002-export.md"
    body = webhooks.push_of(
        [([REQ, "README.md"], [], []), ([], [other, REQ], []), ([], [REQ], ["docs/x.md"])]
    )
    assert [r.requirement for r in triggers("push", body)] == [REQ, other]


def test_removed_requirements_and_other_files_do_not_run() -> None:
    body = webhooks.push_of(
        [
            ([], [], [REQ]),
            (["docs/requirements/REQ-002.md"], [], []),
            ([], [], ["docs/requirements/REQ-002.md"]),  # added then removed in one push
            (["docs/requirements/notes.md", "docs/requirements/REQ-005.txt"], [], []),
            (["notes/REQ-003.md"], [], ["notes/REQ-003.md"]),  # elsewhere, and removed again
        ]
    )
    assert triggers("push", body) == []


@pytest.mark.parametrize("path", ["specs/REQ-002-x.md", "docs/requirements/old/REQ-003.md"])
def test_a_requirement_name_outside_the_default_folder_makes_the_push_a_scan(path: str) -> None:
    # Only the repository's config says whether `specs/` is its requirementsDir, and intake
    # reads no config: the scan job does, and queues the runs.
    body = webhooks.push_of([([REQ, path], [], [])])
    payload = Payload.model_validate_json(body)
    [request] = triggers("push", body)
    assert request.kind is JobKind.SCAN
    assert (request.head_sha, request.base_sha) == (payload.after, payload.before)


@pytest.mark.parametrize(
    "name", ["payload.json", "1.payload.json", "with-installation.payload.json"]
)
def test_tag_deletions_from_the_examples_do_not_run(name: str) -> None:
    assert triggers("push", webhooks.example_bytes("push", name)) == []


def test_pushes_elsewhere_or_deleting_the_branch_do_not_run() -> None:
    commits: list[tuple[list[str], list[str], list[str]]] = [([REQ], [], [])]
    assert not triggers("push", webhooks.push_of(commits, ref="refs/heads/feature"))
    assert not triggers("push", webhooks.push_of(commits, ref="refs/tags/master"))
    assert not triggers("push", webhooks.push_of(commits, deleted=True))


def test_the_apps_own_pushes_do_not_run_but_other_bots_do() -> None:
    commits: list[tuple[list[str], list[str], list[str]]] = [([REQ], [], [])]
    ours = webhooks.push_of(commits, sender=("reqdrive[bot]", "Bot"))
    theirs = webhooks.push_of(commits, sender=("dependabot[bot]", "Bot"))
    assert not triggers("push", ours)
    assert triggers("push", theirs)
    # Without a configured slug reqdrive cannot tell its own pushes apart: no Bot push runs.
    assert not triggers("push", theirs, TriggerContext(app_slug=None))


def test_a_push_at_the_webhooks_commit_cap_asks_github_instead_of_guessing() -> None:
    commits: list[tuple[list[str], list[str], list[str]]] = [
        ([f"src/f{n}.py"], [], []) for n in range(PUSH_COMMITS_CAP)
    ]
    body = webhooks.push_of(commits)
    payload = Payload.model_validate_json(body)
    [request] = triggers("push", body)
    assert request.kind is JobKind.SCAN
    assert (request.head_sha, request.base_sha) == (payload.after, payload.before)
    assert request.requirement == f"PUSH-{payload.after}"
    # One commit fewer lists every file: the payload is believed.
    assert triggers("push", webhooks.push_of([([REQ], [], []), *commits[2:]]))[0].kind is (
        JobKind.RUN
    )


def test_a_commit_github_left_without_file_lists_makes_the_push_a_scan() -> None:
    [request] = triggers("push", webhooks.push_of([([REQ], [], []), ([], [], [])]))
    assert request.kind is JobKind.SCAN  # the empty commit may have changed REQ files too


# issue_comment


def test_a_command_on_an_issue_targets_the_issue_requirement() -> None:
    [request] = triggers("issue_comment", webhooks.comment("/reqdrive retry us-3"))
    assert (request.kind, request.story_id) == (JobKind.RETRY, "US-3")
    assert (request.requirement, request.issue_number) == ("ISSUE-1", 1)
    assert request.comment_id == 492700400
    assert request.installation_id == 1


def test_a_command_on_a_pull_request_leaves_the_requirement_to_the_job() -> None:
    body = webhooks.comment("/reqdrive cancel", on_pull_request=True)
    [request] = triggers("issue_comment", body)
    assert (request.kind, request.requirement, request.issue_number) == (JobKind.CANCEL, None, 1)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("/reqdrive status", JobKind.STATUS),
        ("/reqdrive plan", JobKind.PLAN),
        ("/reqdrive run", JobKind.RUN),
        ("/reqdrive help", JobKind.HELP),
        ("/reqdrive dance", JobKind.HELP),
    ],
)
def test_each_command_asks_for_its_job(text: str, kind: JobKind) -> None:
    [request] = triggers("issue_comment", webhooks.comment(text))
    assert request.kind is kind


def test_ordinary_edited_and_bot_comments_do_nothing() -> None:
    assert not triggers(
        "issue_comment", webhooks.example_bytes("issue_comment", "created.payload.json")
    )
    assert not triggers("issue_comment", webhooks.comment("/reqdrive run", action="edited"))
    for user in [("reqdrive[bot]", "Bot"), ("helper", "Bot"), ("someone[bot]", "User")]:
        assert not triggers("issue_comment", webhooks.comment("/reqdrive run", user=user))


@pytest.mark.parametrize(
    ("name", "file"),
    [
        ("pull_request", "closed.payload.json"),  # its branch is not a reqdrive/ branch
        ("pull_request", "opened.payload.json"),
        ("ping", "payload.json"),
    ],
)
def test_recognised_events_without_a_job_trigger_nothing(name: str, file: str) -> None:
    assert triggers(name, webhooks.example_bytes(name, file)) == []


# hostile or odd payloads (issue 7)


@pytest.mark.parametrize("sender", [("reqdrive[bot]", "Bot"), ("dependabot[bot]", "Bot")])
def test_the_label_added_by_a_bot_or_the_app_itself_starts_nothing(
    sender: tuple[str, str],
) -> None:
    def by_bot(p: dict[str, Any]) -> None:
        p["label"]["name"] = "reqdrive"
        p["sender"]["login"], p["sender"]["type"] = sender

    assert not triggers("issues", webhooks.variant("issues", "labeled.payload.json", by_bot))


def test_a_push_without_the_default_branch_never_triggers_on_a_branch_named_none() -> None:
    body = webhooks.push_of([([REQ], [], [])], ref="refs/heads/None")
    payload = Payload.model_validate_json(body)
    assert payload.repository is not None
    stripped = payload.model_copy(
        update={"repository": payload.repository.model_copy(update={"default_branch": None})}
    )
    assert not triggers_for(Event(name="push", delivery_id="d-1", payload=stripped), CTX)


@pytest.mark.parametrize(
    "body",
    ["    /reqdrive run", "\t/reqdrive run", "```\n/reqdrive run\n```", "> /reqdrive run"],
)
def test_a_command_quoted_in_markdown_starts_nothing(body: str) -> None:
    assert not triggers("issue_comment", webhooks.comment(body))


# lifecycle: pull_request.closed and installation.deleted


def closed_pull(branch: str, *, merged: bool = False) -> bytes:
    def change(payload: dict[str, Any]) -> None:
        payload["pull_request"]["head"]["ref"] = branch
        if merged:  # as GitHub sends a merge: merged, with when
            payload["pull_request"]["merged"] = True
            payload["pull_request"]["merged_at"] = payload["pull_request"]["closed_at"]

    return webhooks.variant("pull_request", "closed.payload.json", change)


def test_a_closed_reqdrive_pull_request_stops_its_run() -> None:
    [request] = triggers("pull_request", closed_pull("reqdrive/issue-3-login"))

    assert request.kind is JobKind.CLOSE
    assert request.branch == "reqdrive/issue-3-login"
    assert request.issue_number == 2  # the example's pull request number
    assert request.merged is False  # the example was closed without merging


def test_a_merged_reqdrive_pull_request_stops_its_run_and_says_merged() -> None:
    [request] = triggers("pull_request", closed_pull("reqdrive/issue-3-login", merged=True))

    assert request.kind is JobKind.CLOSE and request.merged is True


def test_a_closed_pull_request_of_another_branch_does_nothing() -> None:
    assert triggers("pull_request", closed_pull("feature/login")) == []


def test_an_uninstall_drops_the_installation() -> None:
    body = webhooks.example_bytes("installation", "deleted.payload.json")

    [request] = triggers("installation", body)

    assert request.kind is JobKind.UNINSTALL
    assert request.installation_id is not None
    assert request.requirement == f"INSTALLATION-{request.installation_id}"
