"""GitHub's write budget per installation, counted in Redis across every worker."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

import redis

log = logging.getLogger(__name__)

# Secondary rate limit: "no more than 80 content-generating requests per minute". Counted per
# installation in Redis, because every worker on every machine writes with its tokens.
WRITES_PER_MINUTE = 79
WRITE_WINDOW_S = 60.0
WRITES_KEY = "reqdrive:writes:{installation_id}"
# Sliding window over the last minute: admit one write, or say how long until one may go.
BUDGET_SCRIPT = """
local now, window, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  redis.call('EXPIRE', KEYS[1], math.ceil(window) + 1)
  return '0'
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return tostring(tonumber(oldest[2]) + window - now)
"""


class WriteBudget:
    """Content writes per installation stay under GitHub's 80 a minute, across all workers."""

    def __init__(
        self,
        conn: redis.Redis,
        *,
        limit: int = WRITES_PER_MINUTE,
        window_s: float = WRITE_WINDOW_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._conn = conn
        self._script = conn.register_script(BUDGET_SCRIPT)
        self._limit = limit
        self._window_s = window_s
        self._sleep = sleep

    def take(self, installation_id: int) -> None:
        """Return once one more write fits in the installation's last minute."""
        key = WRITES_KEY.format(installation_id=installation_id)
        while True:
            args: list[float | int | str] = [
                time.time(),
                self._window_s,
                self._limit,
                uuid.uuid4().hex,
            ]
            wait = float(self._script(keys=[key], args=args))
            if wait <= 0:
                return
            log.info("write budget spent", extra={"installation_id": installation_id})
            self._sleep(wait)

    def forget(self, installation_id: int) -> None:
        """Drop an installation's count (the App was uninstalled)."""
        self._conn.delete(WRITES_KEY.format(installation_id=installation_id))
