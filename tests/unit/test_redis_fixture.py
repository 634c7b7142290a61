"""The test Redis is real and isolated per session."""

import redis


def test_redis_database_is_real_and_empty(redis_conn: redis.Redis) -> None:
    assert redis_conn.dbsize() == 0
    redis_conn.set("k", "v")
    assert redis_conn.get("k") == b"v"
