"""What the agents cost per installation and calendar month (UTC), counted in Redis across workers.

One hash per installation and month: `total` and one field per run, each what that run's agent
calls reported this month (worker/agents/pricing.py says how a cost is known). The monthly
budget (monthlyBudgetUsd: REQDRIVE_MONTHLY_BUDGET_USD, or the installation's own entry in
REQDRIVE_INSTALLATIONS) is checked against `total` before every agent call and between the
turns of a call that streams them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

import redis

SPEND_KEY = "reqdrive:spend:{installation_id}:{month}"
SPEND_TTL_S = 62 * 24 * 3600  # this month and the last stay readable
TOTAL = "total"


def month_of(at: float) -> str:
    """ "2026-11": the calendar month (UTC) a moment falls in."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m")


def spend_key(installation_id: int, month: str) -> str:
    return SPEND_KEY.format(installation_id=installation_id, month=month)


class SpendStore:
    """Spend per installation and month: charged by every run's agent calls, read by budgets
    and status."""

    def __init__(self, conn: redis.Redis, *, clock: Callable[[], float] = time.time) -> None:
        self.conn = conn
        self.clock = clock

    def charge(self, installation_id: int, run_id: str, usd: float) -> None:
        if usd <= 0:
            return
        key = spend_key(installation_id, month_of(self.clock()))
        pipe = self.conn.pipeline()  # MULTI: the total and the run's share move together
        pipe.hincrbyfloat(key, TOTAL, usd)
        pipe.hincrbyfloat(key, run_id, usd)
        pipe.expire(key, SPEND_TTL_S)
        pipe.execute()

    def month(self, installation_id: int) -> dict[str, float]:
        """This month's spend: `total` and each run's."""
        key = spend_key(installation_id, month_of(self.clock()))
        raw = self.conn.hgetall(key)
        return {_text(k): float(v) for k, v in raw.items()}

    def total(self, installation_id: int) -> float:
        key = spend_key(installation_id, month_of(self.clock()))
        value = self.conn.hget(key, TOTAL)
        return float(value) if value is not None else 0.0

    def this_month(self) -> tuple[str, dict[int, dict[str, float]]]:
        """The month, and every installation's spend in it (`total` and per run)."""
        month = month_of(self.clock())
        pattern = SPEND_KEY.format(installation_id="*", month=month)
        found: dict[int, dict[str, float]] = {}
        for key in self.conn.scan_iter(match=pattern, count=100):
            installation = _text(key).split(":")[2]
            if installation.isdigit():
                found[int(installation)] = self.month(int(installation))
        return month, dict(sorted(found.items()))

    def forget(self, installation_id: int) -> int:
        """Drop every month of this installation (uninstalled: a new install is a new id)."""
        pattern = SPEND_KEY.format(installation_id=installation_id, month="*")
        keys = list(self.conn.scan_iter(match=pattern, count=100))
        return int(self.conn.delete(*keys)) if keys else 0


class InstallationBudget:
    """One run's view of its installation's month: the engine's SharedBudget
    (worker/run/spec.py), asked before every agent call and told what each cost."""

    def __init__(
        self,
        store: SpendStore,
        installation_id: int,
        run_id: str,
        limit_usd: float | None,
        *,
        source: str = "REQDRIVE_MONTHLY_BUDGET_USD",
    ) -> None:
        self.store = store
        self.installation_id = installation_id
        self.run_id = run_id
        self.limit_usd = limit_usd
        self.source = source  # the setting that gave the limit, named when it is reached

    def reached(self) -> str | None:
        if self.limit_usd is None:
            return None
        spent = self.store.total(self.installation_id)
        if spent < self.limit_usd:
            return None
        month = month_of(self.store.clock())
        return (
            f"this installation's agent calls cost ${spent:.2f} in {month} (UTC), its monthly "
            f"budget is ${self.limit_usd:.2f} ({self.source})"
        )

    def remaining(self) -> float | None:
        if self.limit_usd is None:
            return None
        return self.limit_usd - self.store.total(self.installation_id)

    def charge(self, cost_usd: float) -> None:
        self.store.charge(self.installation_id, self.run_id, cost_usd)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
