"""The GitHub client: scoped tokens, retries that never duplicate a write, limits, body size."""

from __future__ import annotations

import time

import pytest
import redis
from github import GithubException

from bot.github.auth import REPLY_PERMISSIONS, RUN_PERMISSIONS, AppAuth
from bot.github.client import ClientSettings, GitHubApp, GitHubUnavailable, RepoClient
from bot.github.limits import BODY_LIMIT, fit_body
from bot.stores.write_budget import WriteBudget
from tests.support.github_http import API, FakeGitHub, private_key_pem

REPO = "octo/demo"
MARKER = "<!-- reqdrive:progress run-1 -->"


class Sleeps:
    """Records the waits the client asks for instead of sleeping through them."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def make_app(sleep: Sleeps | None = None, budget: WriteBudget | None = None) -> GitHubApp:
    auth = AppAuth(42, private_key_pem(), base_url=API)
    settings = ClientSettings(base_url=API, seconds_between_requests=0, seconds_between_writes=0)
    return GitHubApp(auth, settings, budget=budget, sleep=sleep or Sleeps())


@pytest.fixture
def gh(fake_github: FakeGitHub) -> FakeGitHub:
    fake_github.add_repo(REPO, "file:///nowhere.git")
    fake_github.add_issue(REPO, "Add a greeting", "Say hello")
    return fake_github


def client(sleep: Sleeps | None = None, budget: WriteBudget | None = None) -> RepoClient:
    return make_app(sleep, budget).client(7, REPO, RUN_PERMISSIONS)


def test_a_token_names_one_repository_and_the_jobs_permissions_and_is_cached(
    gh: FakeGitHub,
) -> None:
    auth = AppAuth(42, private_key_pem(), base_url=API)
    first = auth.token(7, REPO, RUN_PERMISSIONS)
    again = auth.token(7, REPO, RUN_PERMISSIONS)
    reply = auth.token(7, REPO, REPLY_PERMISSIONS)

    assert first == again != reply
    assert len(gh.tokens) == 2
    assert gh.tokens[0]["repositories"] == ["demo"]
    assert gh.tokens[0]["permissions"] == dict(RUN_PERMISSIONS)
    assert gh.tokens[1]["permissions"]["contents"] == "read"


def test_dropping_an_installation_forgets_its_tokens(gh: FakeGitHub) -> None:
    auth = AppAuth(42, private_key_pem(), base_url=API)
    first = auth.token(7, REPO, RUN_PERMISSIONS)

    assert auth.drop_installation(7) == 1
    assert auth.token(7, REPO, RUN_PERMISSIONS) != first
    assert len(gh.tokens) == 2


def test_a_comment_post_answered_502_twice_is_sent_again_and_lands_once(gh: FakeGitHub) -> None:
    gh.fail("POST", r"/issues/1/comments$", 502, times=2)

    client().upsert_comment(1, MARKER, f"progress\n{MARKER}")

    assert len(gh.comments_on(REPO, 1)) == 1
    posts = [c for c in gh.calls if c.method == "POST" and c.path.endswith("/issues/1/comments")]
    assert [c.status for c in posts] == [502, 502, 201]


def test_a_timed_out_comment_post_that_landed_is_found_not_repeated(gh: FakeGitHub) -> None:
    gh.fail("POST", r"/issues/1/comments$", None, land=True)

    comment_id = client().upsert_comment(1, MARKER, f"progress\n{MARKER}")

    comments = gh.comments_on(REPO, 1)
    assert [c["id"] for c in comments] == [comment_id]
    posts = [c for c in gh.calls if c.method == "POST" and c.path.endswith("/comments")]
    assert len(posts) == 1


def test_a_403_with_retry_after_waits_that_long_then_retries(gh: FakeGitHub) -> None:
    sleeps = Sleeps()
    gh.fail("POST", r"/issues/1/comments$", 403, headers={"retry-after": "2"},
            body={"message": "You have exceeded a secondary rate limit."})  # fmt: skip

    client(sleeps).upsert_comment(1, MARKER, f"progress\n{MARKER}")

    assert sleeps.waits == [2.0]
    assert len(gh.comments_on(REPO, 1)) == 1


def test_a_429_with_a_reset_time_waits_until_then(gh: FakeGitHub) -> None:
    sleeps = Sleeps()
    reset = int(time.time()) + 30
    gh.fail("POST", r"/issues/1/comments$", 429,
            headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)})  # fmt: skip

    client(sleeps).upsert_comment(1, MARKER, f"progress\n{MARKER}")

    assert len(sleeps.waits) == 1 and 25 <= sleeps.waits[0] <= 32


def test_a_403_that_is_not_a_rate_limit_is_not_repeated(gh: FakeGitHub) -> None:
    gh.fail("POST", r"/issues/1/comments$", 403,
            body={"message": "Resource not accessible by integration"})  # fmt: skip

    with pytest.raises(GithubException) as raised:
        client().upsert_comment(1, MARKER, "x")

    assert raised.value.status == 403
    assert gh.comments_on(REPO, 1) == []


def test_a_github_that_never_recovers_ends_in_one_clear_error(gh: FakeGitHub) -> None:
    gh.fail("POST", r"/issues/1/comments$", 502, times=99)

    with pytest.raises(GitHubUnavailable, match="did not answer"):
        client().upsert_comment(1, MARKER, "x")


def test_a_second_upsert_edits_the_comment_in_place(gh: FakeGitHub) -> None:
    repo_client = client()
    first = repo_client.upsert_comment(1, MARKER, f"one\n{MARKER}")
    second = repo_client.upsert_comment(1, MARKER, f"two\n{MARKER}")

    assert first == second
    assert [c["body"] for c in gh.comments_on(REPO, 1)] == [f"two\n{MARKER}"]


def test_pull_request_already_exists_finds_and_returns_the_open_one(gh: FakeGitHub) -> None:
    repo_client = client()
    first = repo_client.open_pull(branch="reqdrive/x", base="main", title="t", body="b", draft=True)
    second = repo_client.open_pull(
        branch="reqdrive/x", base="main", title="t", body="b", draft=True
    )

    assert first.number == second.number
    assert len(gh.pulls_of(REPO)) == 1
    refused = [c for c in gh.calls if c.method == "POST" and c.path.endswith("/pulls")]
    assert [c.status for c in refused] == [201, 422]


def test_ready_for_review_goes_through_graphql_at_the_configured_base(gh: FakeGitHub) -> None:
    repo_client = client()
    pull = repo_client.open_pull(branch="reqdrive/x", base="main", title="t", body="b", draft=True)

    repo_client.set_draft(pull, False)

    assert gh.pulls_of(REPO)[0]["draft"] is False
    assert [c.path for c in gh.calls].count("/api/graphql") == 1


def test_a_long_body_is_cut_below_the_limit_with_a_note_and_keeps_its_marker() -> None:
    body = "x" * 100_000 + "\n\n<!-- reqdrive:run run-1 -->\n"

    cut = fit_body(body, "in the run folder")

    assert len(cut) < BODY_LIMIT
    assert "the full text is in the run folder" in cut
    assert cut.rstrip().endswith("<!-- reqdrive:run run-1 -->")
    assert fit_body("short", "anywhere") == "short"


def test_writes_over_the_budget_wait_for_the_window(redis_conn: redis.Redis) -> None:
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    budget = WriteBudget(redis_conn, limit=2, window_s=0.3, sleep=sleep)
    for _ in range(3):
        budget.take(7)
    budget.take(8)  # another installation has its own budget

    assert len(waits) >= 1 and all(0 < w <= 0.3 for w in waits)
