"""The test Redis is real and isolated per session."""

import socket
import subprocess

import pytest
import redis

from tests.support.ports import closed_port
from tests.support.redis_db import (
    CLAIM_KEY,
    FIRST_DB,
    LAST_DB,
    TEST_REDIS_VARIABLE,
    claimed_database,
    redis_server,
    with_db,
)


def test_redis_database_is_real_and_empty(redis_conn: redis.Redis) -> None:
    assert redis_conn.dbsize() == 0
    redis_conn.set("k", "v")
    assert redis_conn.get("k") == b"v"


def test_a_claim_left_by_a_killed_session_is_taken_over(redis_base_url: str) -> None:
    dead = subprocess.Popen(["true"])  # a pid whose process has ended
    dead.wait()
    control = redis.Redis.from_url(with_db(redis_base_url, 0))
    free = [db for db in range(FIRST_DB, LAST_DB + 1) if not control.exists(CLAIM_KEY.format(db))]
    stale = f"{socket.gethostname()}:{dead.pid}"
    # Every free database claimed by the dead session, as a SIGKILLed run leaves them.
    for db in free:
        control.set(CLAIM_KEY.format(db), stale, ex=60)
    try:
        with claimed_database(redis_base_url) as url:
            db = int(url.rsplit("/", 1)[-1].split("=")[-1])
            assert db in free
            assert control.get(CLAIM_KEY.format(db)) != stale.encode()
    finally:
        for db in free:
            if control.get(CLAIM_KEY.format(db)) == stale.encode():
                control.delete(CLAIM_KEY.format(db))


def test_without_a_named_test_redis_the_tests_use_a_private_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # REDIS_URL and the machine's 127.0.0.1:6379 are somebody's data: never the tests'.
    monkeypatch.delenv(TEST_REDIS_VARIABLE, raising=False)
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
    with redis_server() as url:
        assert url.startswith("unix://")
        assert redis.Redis.from_url(url).ping()


def test_a_named_test_redis_that_does_not_answer_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with closed_port() as port:
        monkeypatch.setenv(TEST_REDIS_VARIABLE, f"redis://127.0.0.1:{port}")
        with pytest.raises(RuntimeError, match="unset the variable"), redis_server():
            pass
