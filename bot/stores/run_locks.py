"""Who may work on a run, across machines: the run lock, and the claim to resume a lost run."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import redis
from redis.exceptions import LockError

from worker.exceptions import RunLockHeld

log = logging.getLogger(__name__)

RUN_LOCK_KEY = "reqdrive:run-lock:{repo}:{requirement}"
# Long enough to ride out a Redis hiccup, short enough that a dead worker's run is free again
# well within the two minutes a crashed run has to be resumed in.
LOCK_TIMEOUT_S = 60.0
# The lock of workers before RedisRunLock (SET NX, EXPIRE at each beat). A run still holding it
# during a rolling deploy keeps its requirement: checked, never taken.
LEGACY_LOCK_KEY = "reqdrive:lock:{repo}:{source}"
# Of the sweepers in every worker, one claims each takeover; the claim outlives the time a
# resume job needs to start beating, so a slow start is not taken over twice.
CLAIM_KEY = "reqdrive:resume-claim:{run_id}"
CLAIM_TTL_S = 120


def run_lock_key(repo: str, requirement: str) -> str:
    """The Redis key for a repository's requirement; GitHub names ignore case."""
    return RUN_LOCK_KEY.format(repo=repo.lower(), requirement=requirement)


class RedisRunLock:
    """redis-py's Lock, refused at once when held, kept alive by a thread while the run lives.

    The lock expires `timeout_s` after the last renewal, so a worker that dies (SIGKILL, a
    machine gone) stops renewing it and another worker can take the run over. With
    `renewer=False` no thread renews it: the holder calls renew() itself, as the GitHub side
    does beside each heartbeat so the lock never outlives the heartbeat the sweeper watches.
    """

    def __init__(
        self,
        conn: redis.Redis,
        key: str,
        *,
        timeout_s: float = LOCK_TIMEOUT_S,
        renew_every_s: float | None = None,
        renewer: bool = True,
    ) -> None:
        self.key = key
        self.timeout_s = timeout_s
        self.renew_every_s = renew_every_s if renew_every_s is not None else timeout_s / 3
        self.renewer = renewer
        self.lock = conn.lock(key, timeout=timeout_s, blocking=False, thread_local=False)

    @contextmanager
    def held(self) -> Iterator[None]:
        if not self.lock.acquire():
            raise RunLockHeld(
                f"this requirement is already being run by another worker (lock {self.key}); "
                f"wait for that run to end, or up to {self.timeout_s:g}s if its worker died"
            )
        stop = threading.Event()
        renewer = threading.Thread(
            target=self._renew, args=(stop,), name="reqdrive-run-lock", daemon=True
        )
        if self.renewer:
            renewer.start()
        try:
            yield
        finally:
            stop.set()
            if self.renewer:
                renewer.join()
            try:
                self.lock.release()
            except LockError:  # it lapsed meanwhile; someone else may hold it now
                log.warning("run lock lost before release", extra={"lock": self.key})

    def renew(self) -> None:
        """Another `timeout_s` from now; LockError when it lapsed and is no longer ours."""
        self.lock.reacquire()

    def _renew(self, stop: threading.Event) -> None:
        while not stop.wait(self.renew_every_s):
            try:
                self.renew()
            except LockError:
                log.error("run lock lost", extra={"lock": self.key})
                return
            except Exception:  # Redis away for a moment: the next round tries again
                log.warning("run lock not renewed", exc_info=True, extra={"lock": self.key})


def legacy_lock_held(conn: redis.Redis, repo: str, requirement: str) -> bool:
    """Whether a worker of the version before RedisRunLock still runs this requirement."""
    return bool(conn.exists(LEGACY_LOCK_KEY.format(repo=repo.lower(), source=requirement)))


def claim_resume(conn: redis.Redis, run_id: str, ttl_s: int = CLAIM_TTL_S) -> bool:
    """Take the resume of a run whose worker died; False when another sweeper took it."""
    return bool(conn.set(CLAIM_KEY.format(run_id=run_id), "1", nx=True, ex=ttl_s))


def forget_claim(conn: redis.Redis, run_id: str) -> None:
    """The run is gone: no takeover of it is claimed any more."""
    conn.delete(CLAIM_KEY.format(run_id=run_id))
