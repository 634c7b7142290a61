"""A real Redis for tests: the configured one, the local one, or an embedded one.

Several test sessions may share one server (pytest-xdist workers, developers running two
suites), so each session claims a database number of its own and flushes only that one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from bot.embedded_redis import EmbeddedRedis, redis_answers

LOCAL_REDIS_URL = "redis://127.0.0.1:6379"
CLAIM_KEY = "reqdrive-tests:db-claim:{}"
CLAIM_TTL_S = 3 * 3600
FIRST_DB, LAST_DB = 1, 15


@contextmanager
def redis_server() -> Iterator[str]:
    """Yield a base URL of a Redis that answers, starting an embedded one if none does.

    REQDRIVE_TEST_REDIS=embedded forces the embedded server (to test a bare laptop's path).
    """
    forced = os.environ.get("REQDRIVE_TEST_REDIS", "")
    candidates = [] if forced == "embedded" else [os.environ.get("REDIS_URL"), LOCAL_REDIS_URL]
    for url in candidates:
        if url and redis_answers(url):
            yield url.rstrip("/")
            return
    with tempfile.TemporaryDirectory(prefix="reqdrive-redis-") as tmp:
        server = EmbeddedRedis(Path(tmp), append_only=False)
        url = server.start()
        try:
            yield url
        finally:
            server.stop()


def with_db(url: str, db: int) -> str:
    """The URL of database `db` on the server at `url` (TCP or unix socket)."""
    if url.startswith("unix://"):
        return f"{url.split('?')[0]}?db={db}"
    return f"{url.rsplit('/', 1)[0] if url.count('/') > 2 else url}/{db}"


@contextmanager
def claimed_database(base_url: str) -> Iterator[str]:
    """Claim a free database number for this session; yield its URL; release it."""
    control = redis.Redis.from_url(with_db(base_url, 0))
    token = f"{os.getpid()}"
    for db in range(FIRST_DB, LAST_DB + 1):
        if control.set(CLAIM_KEY.format(db), token, nx=True, ex=CLAIM_TTL_S):
            break
    else:
        raise RuntimeError("every test database on this Redis is claimed; wait or flush db 0")
    try:
        yield with_db(base_url, db)
    finally:
        if control.get(CLAIM_KEY.format(db)) == token.encode():
            control.delete(CLAIM_KEY.format(db))
