"""Fixtures shared by every test: a real Redis database of our own, isolated git, checked GitHub
calls."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis
import responses

from tests.support.github_api import validated_responses
from tests.support.github_http import FakeGitHub, fake_github_context
from tests.support.redis_db import claimed_database, redis_server
from tests.support.shared_seed import made_private

# Every run a test starts, in this process or a worker or CLI it starts, shares the worker's
# bytecode of library modules, as a deployed worker's runs do (REQDRIVE_BYTECODE_SEED).
os.environ.setdefault("REQDRIVE_BYTECODE_SEED", str(made_private()))


@pytest.fixture(scope="session")
def redis_base_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(scope="session")
def redis_session_url(redis_base_url: str) -> Iterator[str]:
    with claimed_database(redis_base_url) as url:
        yield url


@pytest.fixture
def redis_url(redis_session_url: str) -> Iterator[str]:
    """URL of a Redis database flushed before and after the test."""
    conn = redis.Redis.from_url(redis_session_url)
    conn.flushdb()
    yield redis_session_url
    conn.flushdb()
    conn.close()


@pytest.fixture
def redis_conn(redis_url: str) -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(redis_url)
    yield conn
    conn.close()


@pytest.fixture(autouse=True)
def isolated_git(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every git command in a test sees a throwaway global config, never the developer's."""
    home = tmp_path_factory.mktemp("gitconfig")
    config = home / "gitconfig"
    config.write_text(
        "[user]\n\tname = reqdrive tests\n\temail = tests@reqdrive.invalid\n"
        "[commit]\n\tgpgSign = false\n[init]\n\tdefaultBranch = main\n"
        '[protocol "file"]\n\tallow = always\n'
    )
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    """GitHub's API stood in by `responses`; every request checked against its OpenAPI
    description when the test ends."""
    yield from fake_github_context()


@pytest.fixture
def github_responses() -> Iterator[responses.RequestsMock]:
    """`responses` standing in for GitHub; every request is checked against GitHub's OpenAPI
    description at teardown, so a request GitHub would refuse fails the test that sent it."""
    with validated_responses() as rsps:
        yield rsps
