"""The test Redis is real and isolated per session."""

import socket
import subprocess

import redis

from tests.support.redis_db import CLAIM_KEY, FIRST_DB, LAST_DB, claimed_database, with_db


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
