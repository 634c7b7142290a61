"""Reviews, review threads and their comments in the fake GitHub: REST and GraphQL, GitHub's shapes.

A test sets the scene with `add_review(gh, repo, number, user, state, body, threads)`, each
thread `{"path", "line", "start_line"?, "body", "diff_hunk"?}`, `add_reply(gh, ...)` for a
person answering in a thread, `add_comment(gh, ...)` for one commenting on the pull request
(`issue-comment`). The App reads them as GitHub serves them: REST
`GET .../pulls/{n}/reviews` (schema `pull-request-review`), GraphQL `reviewThreads` (the
`PullRequestReviewThread` / `PullRequestReviewComment` fields of GitHub's schema), and writes
`POST .../pulls/{n}/comments/{id}/replies` (answered as `pull-request-review-comment`) and
GraphQL `resolveReviewThread`. Threads keep their comments in order; `thread_of(gh, id)`,
`replies_in(gh, thread)` and `resolved(gh, thread)` are what tests assert on.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tests.support import webhooks
from tests.support.github_http import APP_LOGIN, ROUTES, FakeGitHub, Handler

STAMP = "2026-11-26T12:00:00Z"
SHA = "0" * 40


def add_review(
    gh: FakeGitHub,
    repo: str,
    number: int,
    user: str,
    state: str,
    body: str = "",
    threads: list[dict[str, Any]] | None = None,
) -> tuple[int, list[str]]:
    """A submitted review (state as the REST API spells it: CHANGES_REQUESTED, APPROVED,
    COMMENTED) with one new thread per entry; its id and the threads' node ids."""
    review_id = next(gh.ids)
    gh.reviews.setdefault((repo, number), []).append(
        {
            "id": review_id,
            "node_id": f"PRR_{review_id}",
            "user": simple_user(gh, user),
            "body": body,
            "state": state,
            "commit_id": SHA,
            "html_url": f"{gh.web}/{repo}/pull/{number}#pullrequestreview-{review_id}",
            "pull_request_url": f"{gh.api}/repos/{repo}/pulls/{number}",
            "_links": {
                "html": {"href": f"{gh.web}/{repo}/pull/{number}"},
                "pull_request": {"href": f"{gh.api}/repos/{repo}/pulls/{number}"},
            },
            "author_association": "COLLABORATOR",
            "submitted_at": STAMP,
        }
    )
    made = []
    for spec in threads or []:
        thread_id = f"PRRT_{next(gh.ids)}"
        gh.threads[thread_id] = {
            "id": thread_id,
            "_repo": repo,
            "_number": number,
            "isResolved": False,
            "isOutdated": False,
            "path": spec["path"],
            "line": spec["line"],  # None: outdated (its lines changed, or the file went)
            "startLine": spec.get("start_line"),
            "originalLine": spec.get("original_line", spec["line"]),
            "originalStartLine": spec.get("original_start_line", spec.get("start_line")),
            "_comments": [],
        }
        _comment(gh, thread_id, user, spec["body"], review_id, spec.get("diff_hunk", ""))
        made.append(thread_id)
    return review_id, made


def add_reply(gh: FakeGitHub, thread_id: str, user: str, body: str, kind: str = "User") -> int:
    """A person (or, `kind="Bot"`, another App) answering in a thread; the comment's id."""
    return _comment(gh, thread_id, user, body, None, None, kind=kind)


def add_comment(gh: FakeGitHub, repo: str, number: int, user: str, body: str) -> int:
    """A person's comment in the pull request's conversation (an issue comment); its id."""
    cid = next(gh.ids)
    gh.comments[cid] = {
        "id": cid,
        "node_id": f"IC_{cid}",
        "body": body,
        "user": simple_user(gh, user),
        "_issue": (repo, number),
        "url": f"{gh.api}/repos/{repo}/issues/comments/{cid}",
        "html_url": f"{gh.web}/{repo}/pull/{number}#issuecomment-{cid}",
        "issue_url": f"{gh.api}/repos/{repo}/issues/{number}",
        "author_association": "COLLABORATOR",
        "created_at": STAMP,
        "updated_at": STAMP,
    }
    return cid


def thread_of(gh: FakeGitHub, thread_id: str) -> dict[str, Any]:
    return gh.threads[thread_id]


def replies_in(gh: FakeGitHub, thread_id: str, login: str = APP_LOGIN) -> list[str]:
    """The bodies of the comments `login` (the App) wrote in the thread."""
    comments = gh.threads[thread_id]["_comments"]
    return [c["body"] for c in comments if c["user"]["login"] == login]


def resolved(gh: FakeGitHub, thread_id: str) -> bool:
    return bool(gh.threads[thread_id]["isResolved"])


def simple_user(gh: FakeGitHub, login: str, kind: str = "User") -> dict[str, Any]:
    """A user as GitHub's `simple-user` schema has it (every required field)."""
    url = f"{gh.api}/users/{login}"
    return {
        **gh._user(login, kind),
        "node_id": f"U_{login}",
        "avatar_url": f"{gh.web}/avatars/{login}",
        "gravatar_id": "",
        "html_url": f"{gh.web}/{login}",
        **{
            f"{name}_url": f"{url}/{name}"
            for name in (
                "events",
                "followers",
                "following",
                "gists",
                "organizations",
                "received_events",
                "repos",
                "starred",
                "subscriptions",
            )
        },
        "site_admin": False,
    }


def _comment(
    gh: FakeGitHub,
    thread_id: str,
    user: str,
    body: str,
    review_id: int | None,
    diff_hunk: str | None,
    *,
    kind: str = "User",
) -> int:
    thread = gh.threads[thread_id]
    repo, number = thread["_repo"], thread["_number"]
    first = thread["_comments"][0] if thread["_comments"] else None
    cid = next(gh.ids)
    comment = {
        "url": f"{gh.api}/repos/{repo}/pulls/comments/{cid}",
        "id": cid,
        "node_id": f"PRRC_{cid}",
        "pull_request_review_id": review_id if review_id is not None else next(gh.ids),
        "diff_hunk": diff_hunk if diff_hunk is not None else (first or {}).get("diff_hunk", ""),
        "path": thread["path"],
        "commit_id": SHA,
        "original_commit_id": SHA,
        "user": simple_user(gh, user, kind),
        "body": body,
        "created_at": STAMP,
        "updated_at": STAMP,
        "html_url": f"{gh.web}/{repo}/pull/{number}#discussion_r{cid}",
        "pull_request_url": f"{gh.api}/repos/{repo}/pulls/{number}",
        "author_association": "COLLABORATOR" if kind == "User" else "NONE",
        "_links": {
            "self": {"href": f"{gh.api}/repos/{repo}/pulls/comments/{cid}"},
            "html": {"href": f"{gh.web}/{repo}/pull/{number}#discussion_r{cid}"},
            "pull_request": {"href": f"{gh.api}/repos/{repo}/pulls/{number}"},
        },
        "line": thread["line"],
        "start_line": thread["startLine"],
        "side": "RIGHT",
    }
    if first is not None:
        comment["in_reply_to_id"] = first["id"]
    thread["_comments"].append(comment)
    gh.review_comments[cid] = (thread_id, comment)
    return cid


def _route(method: str, pattern: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        ROUTES[(method, re.compile(pattern))] = handler
        return handler

    return register


REPO = r"/repos/(?P<repo>[^/]+/[^/]+)"


@_route("GET", REPO + r"/pulls/(?P<n>\d+)/reviews")
def _reviews(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    return list(gh.reviews.get((m["repo"], int(m["n"])), []))


@_route("POST", REPO + r"/pulls/(?P<n>\d+)/comments/(?P<id>\d+)/replies")
def _reply(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    found = gh.review_comments.get(int(m["id"]))
    if found is None or found[1]["pull_request_url"].rsplit("/", 1)[-1] != m["n"]:
        return 404, {"message": "Not Found"}
    cid = _comment(gh, found[0], APP_LOGIN, body["body"], None, None, kind="Bot")
    return 201, gh.review_comments[cid][1]


# GraphQL ------------------------------------------------------------------------------------

THREAD_FIELDS = (
    "id", "isResolved", "isOutdated", "path", "line", "startLine", "originalLine",
    "originalStartLine",
)  # fmt: skip


def answers(query: str) -> bool:
    """Is this GraphQL request one of the review-thread operations this module answers?"""
    return "reviewThreads" in query or "resolveReviewThread" in query


def graphql(gh: FakeGitHub, body: dict[str, Any]) -> tuple[int, Any]:
    query, variables = body["query"], body.get("variables") or {}
    if "resolveReviewThread" in query:
        thread = gh.threads.get(variables.get("threadId", ""))
        if thread is None:
            missing = variables.get("threadId")
            return 200, _not_found(f"Could not resolve to a node with the global id of '{missing}'")
        thread["isResolved"] = True
        return 200, {
            "data": {"resolveReviewThread": {"thread": {"id": thread["id"], "isResolved": True}}}
        }
    repo = f"{variables['owner']}/{variables['name']}"
    number = variables["number"]
    if (repo, number) not in gh.pulls:
        return 200, _not_found(f"Could not resolve to a PullRequest with the number of {number}.")
    threads = [t for t in gh.threads.values() if (t["_repo"], t["_number"]) == (repo, number)]
    nodes = [
        {
            **{k: t[k] for k in THREAD_FIELDS},
            "comments": {"nodes": [_graphql_comment(c) for c in t["_comments"]]},
        }
        for t in threads
    ]
    page = {"hasNextPage": False, "endCursor": None}
    return 200, {
        "data": {
            "repository": {"pullRequest": {"reviewThreads": {"pageInfo": page, "nodes": nodes}}}
        }
    }


def _graphql_comment(comment: dict[str, Any]) -> dict[str, Any]:
    user = comment["user"]
    return {
        "fullDatabaseId": str(comment["id"]),  # BigInt: GitHub sends it as a string
        "body": comment["body"],
        "diffHunk": comment["diff_hunk"],
        "url": comment["html_url"],
        "author": {
            "__typename": "Bot" if user["type"] == "Bot" else "User",
            "login": user["login"],
        },
    }


def _not_found(message: str) -> dict[str, Any]:
    return {"data": None, "errors": [{"type": "NOT_FOUND", "message": message}]}


def review_payload(gh: Any, repo: str, number: int, review_id: int) -> dict[str, Any]:
    """pull_request_review.submitted for a review `add_review` made, on the double's pull
    request as it stands (`gh` a GitHubDouble: the repository, installation and sender set)."""
    payload = webhooks.example("pull_request_review", "submitted.payload.json")
    review = next(r for r in gh.reviews[(repo, number)] if r["id"] == review_id)
    login = review["user"]["login"]
    gh._scene(repo, payload, gh.sender(login))
    pull = gh.pulls[(repo, number)]
    payload["pull_request"].update({"number": number, "id": pull["id"], "title": pull["title"]})
    payload["pull_request"]["head"]["ref"] = pull["head"]["ref"]
    payload["review"].update(
        {"id": review_id, "body": review["body"] or None, "state": review["state"].lower()}
    )
    payload["review"]["user"].update({"login": login, "type": "User"})
    return payload
