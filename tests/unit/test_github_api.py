"""tests/support/github_api.py accepts what GitHub accepts and names what GitHub would refuse."""

from __future__ import annotations

import json

import jsonschema
import pytest
import requests
import responses

from bot.github.review_threads import RESOLVE_MUTATION, THREADS_QUERY
from tests.support.github_api import (
    check_request,
    check_response,
    validated_responses,
    with_nullable,
)

API = "https://api.github.com"
REPO = f"{API}/repos/octo/demo"


def test_a_valid_comment_post_passes() -> None:
    body = json.dumps({"body": "hello"}).encode()
    operation = check_request("POST", f"{REPO}/issues/7/comments", body)
    assert operation == "POST /repos/{owner}/{repo}/issues/{issue_number}/comments"


def test_a_body_with_a_wrong_type_fails_naming_the_operation_and_field() -> None:
    with pytest.raises(AssertionError) as error:
        check_request("POST", f"{REPO}/issues/7/comments", b'{"body": 7}')
    message = str(error.value)
    assert "POST /repos/{owner}/{repo}/issues/{issue_number}/comments" in message
    assert "issues/create-comment" in message
    assert "7 is not of type 'string'" in message


def test_a_missing_required_field_fails() -> None:
    with pytest.raises(AssertionError, match="'head' is a required property"):
        check_request("POST", f"{REPO}/pulls", {"title": "t", "base": "main"})


def test_a_missing_required_body_fails() -> None:
    with pytest.raises(AssertionError, match="the JSON body is missing"):
        check_request("POST", f"{REPO}/issues/7/comments", None)


def test_a_completed_check_run_without_conclusion_fails_on_create_and_update() -> None:
    create = {"name": "reqdrive", "head_sha": "a" * 40, "status": "completed"}
    with pytest.raises(AssertionError, match="needs a 'conclusion'"):
        check_request("POST", f"{REPO}/check-runs", json.dumps(create))
    with pytest.raises(AssertionError, match="needs a 'conclusion'"):
        check_request("PATCH", f"{REPO}/check-runs/5", json.dumps({"status": "completed"}))
    check_request("POST", f"{REPO}/check-runs", json.dumps({**create, "conclusion": "success"}))
    check_request("PATCH", f"{REPO}/check-runs/5", json.dumps({"status": "in_progress"}))


def test_an_unknown_path_or_method_fails_saying_how_to_add_it() -> None:
    with pytest.raises(AssertionError, match=r"add it to tests/fixtures/github/operations\.txt"):
        check_request("GET", f"{REPO}/branches", None)
    with pytest.raises(AssertionError, match=r"the description has GET /repos/\{owner\}/\{repo\}"):
        check_request("DELETE", REPO, None)


def test_path_and_query_parameters_are_validated() -> None:
    with pytest.raises(AssertionError, match="path parameter 'issue_number'"):
        check_request("GET", f"{REPO}/issues/seven", None)
    with pytest.raises(AssertionError, match="query parameter 'state'"):
        check_request("GET", f"{REPO}/pulls?state=merged", None)
    with pytest.raises(AssertionError, match=r"unknown query parameters \['colour'\]"):
        check_request("GET", f"{REPO}/pulls?colour=red", None)
    check_request("GET", f"{REPO}/pulls?state=open&head=octo:reqdrive/x&per_page=100", None)


def test_multi_segment_parameters_and_the_more_specific_template_win() -> None:
    check_request("GET", f"{REPO}/contents/.github/reqdrive.yml?ref=main", None)
    check_request("GET", f"{REPO}/git/ref/heads/reqdrive/add-a-thing", None)
    check_request("GET", f"{REPO}/compare/main...reqdrive/x", None)
    check_request("GET", f"{REPO}/commits/reqdrive/x/check-runs?check_name=reqdrive", None)
    with pytest.raises(AssertionError, match=r"commits/\{ref\}/check-runs"):
        check_request("GET", f"{REPO}/commits/abc/check-runs?status=finished", None)


def test_nullable_beside_a_oneof_accepts_null_as_github_does() -> None:
    # The shape of `milestone` on PATCH /issues/{issue_number}: a oneOf with no type, nullable.
    schema = with_nullable(
        {
            "type": "object",
            "properties": {
                "milestone": {"oneOf": [{"type": "string"}, {"type": "integer"}], "nullable": True},
                "nullable": {"type": "string"},  # a property so named is not the keyword
                "examples": {"type": "string", "nullable": True},
            },
        }
    )
    validator = jsonschema.Draft4Validator(schema)
    for good in [{"milestone": None}, {"milestone": 3}, {"milestone": "v1"}, {"examples": None}]:
        validator.validate(good)
    for bad in [{"milestone": 1.5}, {"nullable": None}]:
        assert not validator.is_valid(bad)


def test_a_plain_enum_in_a_body_is_checked() -> None:
    with pytest.raises(AssertionError, match="is not one of"):
        check_request("POST", f"{REPO}/issues/comments/9/reactions", {"content": "party"})
    check_request("POST", f"{REPO}/issues/comments/9/reactions", {"content": "hooray"})


def test_an_enterprise_base_url_and_a_get_with_no_body() -> None:
    issue = check_request("GET", "https://ghe.test/api/v3/repos/octo/demo/issues/1", b"")
    assert issue == "GET /repos/{owner}/{repo}/issues/{issue_number}"
    token = check_request("POST", "https://ghe.test/api/v3/app/installations/4/access_tokens", None)
    assert token == "POST /app/installations/{installation_id}/access_tokens"


def test_graphql_bodies_are_a_query_and_variables() -> None:
    resolve = "mutation($id: ID!) { resolveReviewThread(input: {threadId: $id}) { thread { id } } }"
    check_request("POST", f"{API}/graphql", {"query": resolve, "variables": {"id": "1"}})
    check_request("POST", "https://ghe.test/api/graphql", b'{"query": "{viewer {login}}"}')
    with pytest.raises(AssertionError, match="'query' must be a string"):
        check_request("POST", f"{API}/graphql", {"mutation": "x"})
    with pytest.raises(AssertionError, match="not JSON"):
        check_request("POST", f"{API}/graphql", b"query {")


def test_graphql_documents_are_checked_against_githubs_schema() -> None:
    for document in (THREADS_QUERY, RESOLVE_MUTATION):  # what reqdrive sends
        assert check_request("POST", f"{API}/graphql", {"query": document}) == "graphql"
    with pytest.raises(AssertionError, match="Cannot query field 'resolved'"):
        check_request("POST", f"{API}/graphql", {"query": '{ node(id: "x") { id } resolved }'})
    with pytest.raises(AssertionError, match="does not parse"):
        check_request("POST", f"{API}/graphql", {"query": "mutation {"})
    wrong_type = (
        "mutation($id: Int!) { resolveReviewThread(input: {threadId: $id}) { thread { id } } }"
    )
    with pytest.raises(AssertionError, match="GitHub's schema refuses it"):
        check_request("POST", f"{API}/graphql", {"query": wrong_type})


def test_validated_responses_checks_every_call_when_it_closes() -> None:
    refused = pytest.raises(AssertionError, match="7 is not of type 'string'")
    with refused, validated_responses() as rsps:
        rsps.add(responses.POST, f"{REPO}/issues/1/comments", json={"id": 1}, status=201)
        requests.post(f"{REPO}/issues/1/comments", json={"body": "fine"}, timeout=5)
        requests.post(f"{REPO}/issues/1/comments", json={"body": 7}, timeout=5)
    with validated_responses() as rsps:
        rsps.add(responses.POST, f"{REPO}/issues/1/comments", json={"id": 1}, status=201)
        assert requests.post(f"{REPO}/issues/1/comments", json={"body": "ok"}, timeout=5).ok


def _comment() -> dict[str, object]:
    user = {
        "login": "reqdrive[bot]", "id": 1, "node_id": "n", "avatar_url": "https://a",
        "gravatar_id": None, "url": "https://u", "html_url": "https://h", "followers_url": "f",
        "following_url": "f", "gists_url": "g", "starred_url": "s", "subscriptions_url": "s",
        "organizations_url": "o", "repos_url": "r", "events_url": "e",
        "received_events_url": "r", "type": "Bot", "site_admin": False,
    }  # fmt: skip
    return {
        "id": 9, "node_id": "c", "url": "https://c", "html_url": "https://c", "body": "hi",
        "user": user, "created_at": "2026-11-22T00:00:00Z",
        "updated_at": "2026-11-22T00:00:00Z", "issue_url": "https://i",
        "author_association": "NONE",
    }  # fmt: skip


def test_an_answer_is_checked_against_the_documented_status_and_schema() -> None:
    url = f"{REPO}/issues/7/comments"
    check_response("POST", url, 201, json.dumps(_comment()))
    with pytest.raises(AssertionError, match="'id' is a required property"):
        check_response("POST", url, 201, {k: v for k, v in _comment().items() if k != "id"})
    with pytest.raises(AssertionError, match=r"does not answer 418 \(documented: \['201'"):
        check_response("POST", url, 418, None)
    # GitHub's error answers have their own documented shape.
    check_response("POST", url, 404, {"message": "Not Found", "documentation_url": "https://d"})
    with pytest.raises(AssertionError, match="404 answer"):
        check_response("POST", url, 404, {"message": 404})
