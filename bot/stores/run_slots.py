"""How many runs of one installation hold a worker at once, across machines: leased slots.

A worker takes a slot before it starts a run's job (bot/jobs/worker_class.py) and gives it back
when the job ends; while the job runs the worker renews the lease with rq's own heartbeat. A
worker that dies stops renewing, and its slot is free again once the lease lapses.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

SLOTS_KEY = "reqdrive:run-slots:{installation_id}"
# Longer than rq's job-monitoring interval (30 s), at which the worker renews it.
SLOT_LEASE_S = 120.0
# Free a lapsed lease, then take a slot for ARGV[4] when it holds one already or one is free.
ACQUIRE_SCRIPT = """
local now, lease, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[4]) or redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now + lease, ARGV[4])
  redis.call('EXPIRE', KEYS[1], math.ceil(lease) + 1)
  return 1
end
return 0
"""


def slots_key(installation_id: int) -> str:
    return SLOTS_KEY.format(installation_id=installation_id)


class RunSlots:
    """At most `limit` jobs of one installation running, each holding a leased slot."""

    def __init__(
        self,
        conn: redis.Redis,
        *,
        lease_s: float = SLOT_LEASE_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.conn = conn
        self.lease_s = lease_s
        self.clock = clock
        self._acquire = conn.register_script(ACQUIRE_SCRIPT)

    def acquire(self, installation_id: int, holder: str, limit: int) -> bool:
        args: list[float | str] = [self.clock(), self.lease_s, limit, holder]
        return bool(self._acquire(keys=[slots_key(installation_id)], args=args))

    def renew(self, installation_id: int, holder: str) -> None:
        key = slots_key(installation_id)
        pipe = self.conn.pipeline()
        pipe.zadd(key, {holder: self.clock() + self.lease_s}, xx=True)
        pipe.expire(key, int(self.lease_s) + 1)
        pipe.execute()

    def release(self, installation_id: int, holder: str) -> None:
        self.conn.zrem(slots_key(installation_id), holder)

    def holders(self, installation_id: int) -> list[str]:
        """The jobs holding a slot now (lapsed leases left out)."""
        live = self.conn.zrangebyscore(slots_key(installation_id), self.clock(), "+inf")
        return [h.decode() if isinstance(h, bytes) else str(h) for h in live]

    def forget(self, installation_id: int) -> None:
        self.conn.delete(slots_key(installation_id))
