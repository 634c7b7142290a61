"""The installation's month and its run slots, in a real Redis shared by every worker."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import redis

from bot.cli import main
from bot.stores.run_slots import RunSlots
from bot.stores.spend import InstallationBudget, SpendStore


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_spend_is_counted_per_installation_and_month_across_runs(redis_conn: redis.Redis) -> None:
    clock = Clock(at("2026-11-30T23:59:00"))
    store = SpendStore(redis_conn, clock=clock)
    first = InstallationBudget(store, 7, "run-a", limit_usd=1.0)
    second = InstallationBudget(SpendStore(redis_conn, clock=clock), 7, "run-b", limit_usd=1.0)
    other = InstallationBudget(store, 8, "run-c", limit_usd=1.0)

    first.charge(0.5)
    other.charge(3.0)
    assert second.reached() is None
    second.charge(0.5)  # another worker's run of the same installation
    assert store.month(7) == {"total": 1.0, "run-a": 0.5, "run-b": 0.5}
    why = first.reached()
    assert why is not None and "$1.00 in 2026-11 (UTC)" in why and "$1.00" in why

    clock.now = at("2026-12-01T00:00:01")  # a new month starts from nothing
    assert first.reached() is None and store.total(7) == 0.0
    assert InstallationBudget(store, 7, "run-a", limit_usd=None).reached() is None

    clock.now = at("2026-11-15T00:00:00")
    assert store.forget(7) == 1
    assert store.total(7) == 0.0 and store.total(8) == 3.0


def test_status_shows_each_installations_spend_this_month_and_per_run(
    redis_url: str,
    redis_conn: redis.Redis,
    tmp_path: object,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = SpendStore(redis_conn)
    store.charge(7, "run-a", 0.25)
    store.charge(7, "run-b", 1.5)
    store.charge(9, "run-c", 0.1)
    store.charge(11, "run-d", 0.5)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("REQDRIVE_MONTHLY_BUDGET_USD", "20")
    # Installation 9's own cap, and none for 11 (null), whatever the default says.
    overrides = '{"9": {"monthlyBudgetUsd": 5}, "11": {"monthlyBudgetUsd": null}}'
    monkeypatch.setenv("REQDRIVE_INSTALLATIONS", overrides)
    monkeypatch.chdir(str(tmp_path))

    assert main(["status", "--queue", "reqdrive-spend-test"]) == 0
    lines = capsys.readouterr().out.splitlines()

    start = next(i for i, line in enumerate(lines) if line.startswith("agent spend in "))
    assert lines[start + 1 :] == [
        "  installation 7: $1.75 of its $20.00 monthlyBudgetUsd",
        "    run-b: $1.50",
        "    run-a: $0.25",
        "  installation 9: $0.10 of its $5.00 monthlyBudgetUsd",
        "    run-c: $0.10",
        "  installation 11: $0.50",
        "    run-d: $0.50",
    ]


def test_slots_admit_a_limit_per_installation_and_free_a_dead_workers_after_its_lease(
    redis_conn: redis.Redis,
) -> None:
    clock = Clock(1000.0)
    slots = RunSlots(redis_conn, lease_s=120, clock=clock)

    assert slots.acquire(7, "job-1", limit=2)
    assert slots.acquire(7, "job-2", limit=2)
    assert not slots.acquire(7, "job-3", limit=2)
    assert slots.acquire(8, "job-4", limit=2)  # another installation has its own
    assert slots.acquire(7, "job-1", limit=2)  # a holder asking again keeps its slot

    slots.release(7, "job-2")
    assert slots.acquire(7, "job-3", limit=2)
    assert sorted(slots.holders(7)) == ["job-1", "job-3"]

    clock.now = 1100.0
    slots.renew(7, "job-3")  # job-1's worker died and renews nothing
    clock.now = 1121.0
    assert slots.holders(7) == ["job-3"]
    assert slots.acquire(7, "job-5", limit=2)
