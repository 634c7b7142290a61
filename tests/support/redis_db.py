"""A real Redis for tests: a private embedded one, or the one named for tests explicitly.

Tests flush what they use, so they never touch a Redis nobody named for them: not REDIS_URL,
not whatever answers on 127.0.0.1:6379 (a developer's own data). REQDRIVE_TEST_REDIS_URL names a
server the tests may use (.ci/run names the machine's); several test sessions may share it
(pytest-xdist workers, two suites at once), so each session claims a database number of its own
and flushes only that one.
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from bot.ops.embedded_redis import EmbeddedRedis, redis_answers

TEST_REDIS_VARIABLE = "REQDRIVE_TEST_REDIS_URL"
CLAIM_KEY = "reqdrive-tests:db-claim:{}"
CLAIM_TTL_S = 3 * 3600
FIRST_DB, LAST_DB = 1, 15
# Compare and set: of two sessions finding the same abandoned claim, only one gets it.
TAKE_OVER_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
end
return false
"""


@contextmanager
def redis_server() -> Iterator[str]:
    """Yield a base URL of the Redis named by REQDRIVE_TEST_REDIS_URL, else of a private one."""
    named = os.environ.get(TEST_REDIS_VARIABLE, "")
    if named:
        if not redis_answers(named):
            raise RuntimeError(
                f"{TEST_REDIS_VARIABLE} names a Redis that does not answer; start it, or unset "
                "the variable to let the tests start a private one"
            )
        yield named.rstrip("/")
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
    """Claim a free database number for this session; yield its URL; release it.

    A session killed before it released its claim (SIGKILL, a CI timeout) leaves the claim
    for CLAIM_TTL_S; one whose holder is a dead process on this machine is taken over, so
    killed runs cannot use up the fifteen databases.
    """
    control = redis.Redis.from_url(with_db(base_url, 0))
    token = f"{socket.gethostname()}:{os.getpid()}"
    take_over = control.register_script(TAKE_OVER_SCRIPT)
    for db in range(FIRST_DB, LAST_DB + 1):
        key = CLAIM_KEY.format(db)
        if control.set(key, token, nx=True, ex=CLAIM_TTL_S):
            break
        holder = control.get(key)  # bytes: this connection does not decode responses
        if (
            isinstance(holder, bytes)
            and _abandoned(holder.decode())
            and take_over(keys=[key], args=[holder, token, CLAIM_TTL_S])
        ):
            break
    else:
        raise RuntimeError("every test database on this Redis is claimed; wait or flush db 0")
    try:
        yield with_db(base_url, db)
    finally:
        if control.get(CLAIM_KEY.format(db)) == token.encode():
            control.delete(CLAIM_KEY.format(db))


def _abandoned(holder: str) -> bool:
    """Whether a claim's holder ("host:pid") is a process on this machine that has ended."""
    host, _, pid = holder.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False  # another machine's session, or an old-style claim: wait for its expiry
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False
