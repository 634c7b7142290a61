"""The GitHub double answers as GitHub does: App auth, expiring tokens, git over HTTP, faults."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.github.review_threads import RESOLVE_MUTATION, THREADS_QUERY
from tests.support import webhooks
from tests.support.github_api import check_response
from tests.support.github_ci import (
    CiJob,
    add_workflow_run,
    check_suite_payload,
    workflow_run_payload,
)
from tests.support.github_double import GitHubDouble, github_double
from tests.support.github_reviews import add_review, replies_in, resolved

REPO = "acme/shop"


@pytest.fixture
def double(tmp_path: Path) -> Iterator[GitHubDouble]:
    source = tmp_path / "source"
    source.mkdir()
    _git(source, "init", "-q", "-b", "main")
    (source / "README.md").write_text("shop\n")
    _git(source, "add", ".")
    _git(source, "commit", "-q", "-m", "first")
    with github_double(tmp_path / "github") as gh:
        gh.add_repository(REPO, source)
        gh.set_role(REPO, "alice", "write")
        yield gh


def _git(cwd: Path, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    auth = []
    if token is not None:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        auth = ["-c", f"http.extraHeader=Authorization: Basic {basic}"]
    return subprocess.run(
        ["git", *auth, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        timeout=60,
    )


def _app_jwt(gh: GitHubDouble, key: Any = None) -> str:
    now = int(time.time())
    claims = {"iat": now - 30, "exp": now + 300, "iss": str(gh.app_id)}
    return jwt.encode(claims, key or gh.private_key_pem, algorithm="RS256")


def _token(gh: GitHubDouble, key: Any = None) -> requests.Response:
    return requests.post(
        f"{gh.api}/app/installations/1/access_tokens",
        headers={"Authorization": f"Bearer {_app_jwt(gh, key)}"},
        json={"repositories": ["shop"], "permissions": {"issues": "write"}},
        timeout=10,
    )


def _get(gh: GitHubDouble, path: str, token: str) -> requests.Response:
    return requests.get(f"{gh.api}{path}", headers={"Authorization": f"token {token}"}, timeout=10)


def test_a_token_is_issued_only_to_the_apps_own_jwt(double: GitHubDouble) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    refused = _token(double, other)
    assert refused.status_code == 401
    assert "message" in refused.json()

    issued = _token(double)
    assert issued.status_code == 201
    token = issued.json()["token"]
    repo = _get(double, f"/repos/{REPO}", token)
    assert repo.status_code == 200
    assert repo.json()["full_name"] == REPO
    assert int(repo.headers["X-RateLimit-Remaining"]) < int(repo.headers["X-RateLimit-Limit"])
    assert _get(double, f"/repos/{REPO}", "ghs_made_up").status_code == 401


def test_an_expired_token_is_refused_on_the_api_and_on_git(
    double: GitHubDouble, tmp_path: Path
) -> None:
    token = _token(double).json()["token"]
    clone = _git(tmp_path, "clone", "-q", double.repos[REPO]["clone_url"], "one", token=token)
    assert clone.returncode == 0, clone.stderr
    assert (tmp_path / "one" / "README.md").read_text() == "shop\n"

    double.expire_tokens()
    assert _get(double, f"/repos/{REPO}", token).status_code == 401
    again = _git(tmp_path, "clone", "-q", double.repos[REPO]["clone_url"], "two", token=token)
    assert again.returncode != 0
    assert double.git_requests[-1][2] == 401
    no_token = _git(tmp_path, "clone", "-q", double.repos[REPO]["clone_url"], "three")
    assert no_token.returncode != 0
    assert double.git_requests[-1][2] == 401


def test_a_push_moves_the_branch_and_becomes_a_push_delivery(
    double: GitHubDouble, tmp_path: Path
) -> None:
    token = double.issue_token(1)
    url = double.repos[REPO]["clone_url"]
    assert _git(tmp_path, "clone", "-q", url, "work", token=token).returncode == 0
    work = tmp_path / "work"
    (work / "docs").mkdir()
    (work / "docs" / "REQ-001-cart.md").write_text("# Cart\n")
    _git(work, "add", ".")
    _git(work, "commit", "-q", "-m", "Add REQ-001")
    pushed = _git(work, "push", "-q", "origin", "main", token=token)
    assert pushed.returncode == 0, pushed.stderr

    head = _git(work, "rev-parse", "HEAD").stdout.strip()
    assert double.branch_heads[(REPO, "main")] == head
    [push] = double.pushes
    assert push["after"] == head
    payload = double.push_payload(push, "alice")
    webhooks.validate("push", payload)
    assert payload["commits"][-1]["added"] == ["docs/REQ-001-cart.md"]
    assert payload["installation"]["id"] == 1


def test_a_request_github_would_refuse_fails_the_test(tmp_path: Path) -> None:
    refused = pytest.raises(AssertionError, match="requests GitHub would refuse")
    with refused, github_double(tmp_path) as gh:
        token = gh.issue_token(1)
        answer = requests.post(
            f"{gh.api}/repos/{REPO}/issues/1/comments",
            headers={"Authorization": f"token {token}"},
            json={"body": 123},
            timeout=10,
        )
        assert answer.status_code == 422
        assert answer.json()["errors"]


def test_it_names_each_use_of_a_token_on_a_repository_it_does_not_serve(
    tmp_path: Path, double: GitHubDouble
) -> None:
    other = "acme/tools"
    double.add_repository(other, tmp_path / "source", installation=2)
    token = _token(double).json()["token"]  # installation 1, narrowed to "shop"
    assert _get(double, f"/repos/{REPO}", token).status_code == 200
    assert double.misused_tokens() == []

    _get(double, f"/repos/{other}", token)
    fetched = _git(tmp_path, "ls-remote", double.repos[other]["clone_url"], token=token)

    assert fetched.returncode == 0
    assert double.misused_tokens() == [
        f"api {other} with installation 1's token",
        f"git {other} with installation 1's token",
    ]


def test_a_request_cut_off_by_a_dying_client_is_dropped_not_judged(tmp_path: Path) -> None:
    with github_double(tmp_path) as gh:
        token = gh.issue_token(1)
        host, port = gh.server.server_address[:2]
        with socket.create_connection((str(host), int(port)), timeout=10) as client:
            client.sendall(
                f"POST /api/v3/repos/{REPO}/check-runs HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: token {token}\r\nContent-Type: application/json\r\n"
                'Content-Length: 100\r\n\r\n{"name"'.encode()
            )
            client.shutdown(socket.SHUT_WR)  # the process is gone: no more bytes come
            assert client.recv(1024) == b""  # closed without an answer

    assert gh.violations == []
    assert gh.requests_made() == []


def test_faults_by_count_fraction_throttle_and_landed_writes(double: GitHubDouble) -> None:
    token = double.issue_token(1)
    number = double.add_issue(REPO, "Cart", "body")
    double.fail_next(2, status=502, method="GET")
    statuses = [_get(double, f"/repos/{REPO}", token).status_code for _ in range(3)]
    assert statuses == [502, 502, 200]

    double.throttle_next(1, retry_after=7, method="GET")
    throttled = _get(double, f"/repos/{REPO}", token)
    assert throttled.status_code == 403
    assert throttled.headers["Retry-After"] == "7"

    double.fail_some(1.0)
    assert _get(double, f"/repos/{REPO}", token).status_code == 502
    double.fail_some(0.5)
    answers = [_get(double, f"/repos/{REPO}", token).status_code for _ in range(40)]
    assert {502, 200} == set(answers)
    double.fail_some(0.0)

    double.land_then_fail("POST", r"/comments$")
    landed = requests.post(
        f"{double.api}/repos/{REPO}/issues/{number}/comments",
        headers={"Authorization": f"token {token}"},
        json={"body": "progress"},
        timeout=10,
    )
    assert landed.status_code == 502
    assert [c["body"] for c in double.comments_on(REPO, number)] == ["progress"]

    double.delay = 0.3
    started = time.monotonic()
    assert _get(double, f"/repos/{REPO}", token).status_code == 200
    assert time.monotonic() - started >= 0.3


def test_lists_are_paginated_with_link_and_creations_have_location(double: GitHubDouble) -> None:
    token = double.issue_token(1)
    number = double.add_issue(REPO, "Cart", "body")
    for n in range(35):
        created = requests.post(
            f"{double.api}/repos/{REPO}/issues/{number}/comments",
            headers={"Authorization": f"token {token}"},
            json={"body": f"c{n}"},
            timeout=10,
        )
        assert created.status_code == 201
        assert created.headers["Location"] == created.json()["url"]
    first = _get(double, f"/repos/{REPO}/issues/{number}/comments", token)
    assert len(first.json()) == 30
    assert first.links["next"]["url"].endswith("page=2")
    second = requests.get(
        first.links["next"]["url"], headers={"Authorization": f"token {token}"}, timeout=10
    )
    assert [c["body"] for c in second.json()] == [f"c{n}" for n in range(30, 35)]
    assert "next" not in second.links
    missing = _get(double, f"/repos/{REPO}/issues/999", token)
    assert missing.status_code == 404
    assert missing.json()["message"] == "Not Found"


def test_deliveries_are_built_from_its_state_validated_and_signed(double: GitHubDouble) -> None:
    received: list[tuple[dict[str, str], bytes]] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((dict(self.headers.items()), body))
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        number = double.add_issue(REPO, "Cart totals", "As a shopper…")
        url = f"http://127.0.0.1:{server.server_address[1]}/webhooks"
        labeled = double.labeled_payload(REPO, number, "reqdrive", "alice")
        assert double.deliver(url, "issues", labeled).status_code == 202
        own = double.comment_payload(REPO, number, "Working on it", "reqdrive[bot]")
        assert double.deliver(url, "issue_comment", own).status_code == 202
    finally:
        server.shutdown()
        server.server_close()

    (headers, body), (_, bot_body) = received
    expected = "sha256=" + hmac.new(webhooks.SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert headers["X-Hub-Signature-256"] == expected
    payload = json.loads(body)
    assert payload["issue"]["number"] == number
    assert payload["issue"]["title"] == "Cart totals"
    assert payload["repository"]["full_name"] == REPO
    assert [label["name"] for label in payload["issue"]["labels"]] == ["reqdrive"]
    assert json.loads(bot_body)["sender"]["type"] == "Bot"


def test_ci_runs_jobs_logs_suites_and_annotations_answer_as_github_documents(
    double: GitHubDouble,
) -> None:
    token = _token(double).json()["token"]
    head = double.branch_heads[(REPO, "main")]
    job = CiJob(
        "tests",
        "failure",
        log="E   assert 1 == 2\nFAILED tests/test_x.py::test_y\n",
        annotations=[{"path": "tests/test_x.py", "line": 3, "message": "assert 1 == 2"}],
    )
    run = add_workflow_run(double, REPO, head_sha=head, branch="main", name="CI", jobs=[job])
    base = f"/repos/{REPO}"
    answers = {
        f"{base}/actions/runs/{run['id']}/jobs": None,
        f"{base}/check-suites/{run['check_suite_id']}/check-runs": None,
        f"{base}/check-runs/{run['_jobs'][0]}/annotations": None,
    }
    for path in answers:
        answer = _get(double, path, token)
        check_response("GET", path, answer.status_code, answer.json())
        answers[path] = answer.json()
    [listed] = answers[f"{base}/actions/runs/{run['id']}/jobs"]["jobs"]  # type: ignore[index]
    assert (listed["name"], listed["conclusion"]) == ("tests", "failure")

    logs = f"{base}/actions/jobs/{run['_jobs'][0]}/logs"
    redirect = requests.get(
        f"{double.api}{logs}",
        headers={"Authorization": f"token {token}"},
        allow_redirects=False,
        timeout=10,
    )
    check_response("GET", logs, redirect.status_code, None)
    assert redirect.status_code == 302
    download = requests.get(redirect.headers["Location"], timeout=10)  # no token: signed URL
    assert download.text == job.log


def test_ci_deliveries_are_github_shaped(double: GitHubDouble) -> None:
    head = double.branch_heads[(REPO, "main")]
    run = add_workflow_run(double, REPO, head_sha=head, branch="main", name="CI", jobs=[])
    payload = workflow_run_payload(double, REPO, run, pulls=[], sender="alice")
    assert webhooks.validate("workflow_run", payload) == "workflow_run$example"
    assert payload["workflow_run"]["conclusion"] == "success"
    suite = check_suite_payload(
        double, REPO, head_sha=head, conclusion="failure", pulls=[], app_id=7, app_slug="ci"
    )
    assert webhooks.validate("check_suite", suite) == "check_suite$completed"
    broken = {**payload, "workflow_run": {"id": 1}}
    with pytest.raises(AssertionError, match="missing"):
        webhooks.validate("workflow_run", broken)


def test_reviews_threads_replies_and_resolution_are_served_in_githubs_shapes(
    double: GitHubDouble,
) -> None:
    token = double.issue_token(1)
    auth = {"Authorization": f"token {token}"}
    number = double.add_issue(REPO, "Cart", "body")
    double.pulls[(REPO, number)] = {"number": number, "node_id": f"PR_{number}"}
    review_id, (thread,) = add_review(
        double, REPO, number, "alice", "CHANGES_REQUESTED", "Please also log it",
        [{"path": "cart.py", "line": 3, "start_line": 1, "body": "rename x", "diff_hunk": "@@"}],
    )  # fmt: skip

    listed = _get(double, f"/repos/{REPO}/pulls/{number}/reviews", token)
    url = f"{double.api}/repos/{REPO}/pulls/{number}/reviews"
    check_response("GET", url, listed.status_code, listed.json())
    assert [(r["id"], r["state"]) for r in listed.json()] == [(review_id, "CHANGES_REQUESTED")]

    threads = requests.post(
        f"{double.base}/api/graphql",
        headers=auth,
        json={"query": THREADS_QUERY, "variables": {"owner": "acme", "name": "shop",
                                                     "number": number, "after": None}},
        timeout=10,
    ).json()["data"]["repository"]["pullRequest"]["reviewThreads"]  # fmt: skip
    [node] = threads["nodes"]
    assert (node["id"], node["isResolved"], node["path"], node["line"], node["startLine"]) == (
        thread, False, "cart.py", 3, 1,
    )  # fmt: skip
    [first] = node["comments"]["nodes"]
    assert first["body"] == "rename x" and first["author"] == {
        "__typename": "User",
        "login": "alice",
    }

    reply_url = (
        f"{double.api}/repos/{REPO}/pulls/{number}/comments/{first['fullDatabaseId']}/replies"
    )
    reply = requests.post(reply_url, headers=auth, json={"body": "done"}, timeout=10)
    assert reply.status_code == 201
    check_response("POST", reply_url, 201, reply.json())
    assert reply.json()["in_reply_to_id"] == int(first["fullDatabaseId"])
    resolve = {"query": RESOLVE_MUTATION, "variables": {"threadId": thread}}
    done = requests.post(f"{double.base}/api/graphql", headers=auth, json=resolve, timeout=10)
    assert done.json()["data"]["resolveReviewThread"]["thread"] == {
        "id": thread,
        "isResolved": True,
    }
    assert resolved(double, thread) and replies_in(double, thread) == ["done"]
    unknown = {"query": RESOLVE_MUTATION, "variables": {"threadId": "PRRT_nope"}}
    refused = requests.post(f"{double.base}/api/graphql", headers=auth, json=unknown, timeout=10)
    assert refused.json()["errors"][0]["type"] == "NOT_FOUND"
    assert double.misused_tokens() == []
