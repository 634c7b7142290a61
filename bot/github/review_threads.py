"""A pull request's review threads, reviews and comments read; a thread replied to and resolved."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from bot.github.client import RepoClient

# GitHub's GraphQL schema (PullRequest.reviewThreads, PullRequestReviewThread,
# PullRequestReviewComment): node ids and isResolved exist only there, and a thread's
# comments come with their path, lines and diff hunk in the same answer. `fullDatabaseId`
# (BigInt, sent as a string) is the REST id replies are posted to; `databaseId` is deprecated.
THREADS_QUERY = """
query($owner: String!, $name: String!, $number: Int!, $after: String) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewThreads(first: 50, after: $after) {
        pageInfo { hasNextPage endCursor }
        nodes {
          id
          isResolved
          isOutdated
          path
          line
          startLine
          originalLine
          originalStartLine
          comments(first: 50) {
            nodes {
              fullDatabaseId
              body
              diffHunk
              url
              author { __typename login }
            }
          }
        }
      }
    }
  }
}
"""
RESOLVE_MUTATION = """
mutation($threadId: ID!) {
  resolveReviewThread(input: {threadId: $threadId}) {
    thread { id isResolved }
  }
}
"""
MAX_THREAD_PAGES = 10  # 500 threads: more than any pull request a person reviews
PER_PAGE = 100


@dataclass(frozen=True)
class ThreadComment:
    """One comment of a review thread as GitHub gives it."""

    id: int
    author: str
    is_bot: bool
    body: str
    diff_hunk: str = ""
    url: str = ""


@dataclass(frozen=True)
class ReviewThread:
    """A review thread: its node id (to resolve it), where it is, and its comments in order."""

    id: str
    resolved: bool
    path: str
    line: int | None
    start_line: int | None
    comments: list[ThreadComment] = field(default_factory=list)
    outdated: bool = False
    # Where the thread was when written: GitHub gives `line` null once the lines it was on
    # changed or their file was deleted, and keeps these.
    original_line: int | None = None
    original_start_line: int | None = None


@dataclass(frozen=True)
class Said:
    """A review's body or an issue comment on the pull request, by whom."""

    id: int
    author: str
    is_bot: bool
    body: str
    state: str = ""  # a review's: APPROVED, CHANGES_REQUESTED, COMMENTED (REST spells it so)
    url: str = ""


def review_threads(client: RepoClient, number: int) -> list[ReviewThread]:
    """Every review thread of the pull request, resolved or not, in GitHub's order."""
    owner, name = client.full_name.split("/", 1)
    threads: list[ReviewThread] = []
    after: str | None = None
    for _ in range(MAX_THREAD_PAGES):
        variables = {"owner": owner, "name": name, "number": number, "after": after}
        _, data = client.read(
            lambda v=variables: client.gh.requester.graphql_query(THREADS_QUERY, v)  # type: ignore[misc]
        )
        found = data["data"]["repository"]["pullRequest"]["reviewThreads"]
        threads += [_thread(node) for node in found["nodes"] if node]
        if not found["pageInfo"]["hasNextPage"]:
            break
        after = found["pageInfo"]["endCursor"]
    return threads


def reviews(client: RepoClient, number: int) -> list[Said]:
    """The pull request's reviews with a body (REST `GET .../pulls/{n}/reviews`)."""
    url = f"/repos/{client.full_name}/pulls/{number}/reviews"
    return [_said(r) for r in _pages(client, url) if r.get("body")]


def issue_comments(client: RepoClient, number: int) -> list[Said]:
    """The pull request's conversation comments (REST `GET .../issues/{n}/comments`)."""
    url = f"/repos/{client.full_name}/issues/{number}/comments"
    return [_said(c) for c in _pages(client, url)]


def _said(item: dict[str, Any]) -> Said:
    """A review or an issue comment as REST gives it (an issue comment has no `state`)."""
    return Said(
        id=int(item["id"]),
        author=_login(item.get("user")),
        is_bot=_is_bot(item.get("user")),
        body=item.get("body") or "",
        state=str(item.get("state") or ""),
        url=str(item.get("html_url") or ""),
    )


def reply_in_thread(client: RepoClient, number: int, comment_id: int, body: str) -> None:
    """A reply in the thread of `comment_id` (REST `POST .../comments/{id}/replies`)."""
    url = f"/repos/{client.full_name}/pulls/{number}/comments/{comment_id}/replies"
    client.write(lambda: client.gh.requester.requestJsonAndCheck("POST", url, input={"body": body}))


def resolve_thread(client: RepoClient, thread_id: str) -> None:
    """Mark the thread resolved (GraphQL `resolveReviewThread`; resolving twice is harmless)."""
    variables = {"threadId": thread_id}
    client.write(lambda: client.gh.requester.graphql_query(RESOLVE_MUTATION, variables))


def _pages(client: RepoClient, url: str) -> Iterator[dict[str, Any]]:
    page = 1
    while True:
        params = {"per_page": PER_PAGE, "page": page}
        _, items = client.read(
            lambda p=params: client.gh.requester.requestJsonAndCheck("GET", url, parameters=p)  # type: ignore[misc]
        )
        yield from items
        if len(items) < PER_PAGE:
            return
        page += 1


def _thread(node: dict[str, Any]) -> ReviewThread:
    comments = [
        ThreadComment(
            id=int(c["fullDatabaseId"]),
            author=_login(c.get("author")),
            is_bot=_is_bot(c.get("author")),
            body=c.get("body") or "",
            diff_hunk=c.get("diffHunk") or "",
            url=c.get("url") or "",
        )
        for c in (node.get("comments") or {}).get("nodes") or []
        if c and c.get("fullDatabaseId") is not None
    ]
    return ReviewThread(
        id=node["id"],
        resolved=bool(node["isResolved"]),
        path=node["path"],
        line=node.get("line"),
        start_line=node.get("startLine"),
        comments=comments,
        outdated=bool(node.get("isOutdated")),
        original_line=node.get("originalLine"),
        original_start_line=node.get("originalStartLine"),
    )


def _login(user: dict[str, Any] | None) -> str:
    return str((user or {}).get("login") or "ghost")  # a deleted account is GitHub's "ghost"


def _is_bot(user: dict[str, Any] | None) -> bool:
    # REST says "type": "Bot", GraphQL "__typename": "Bot"; an App's login ends in [bot].
    user = user or {}
    kind = user.get("type") or user.get("__typename")
    return kind == "Bot" or _login(user).endswith("[bot]")
