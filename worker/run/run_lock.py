"""One run per repository and requirement at a time: a file lock on one machine, a Redis lock
across machines that lapses on its own when its holder dies."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Protocol

from redis.exceptions import LockError

from worker.exceptions import RunLockHeld
from worker.run.run_folder import RunFolder

if TYPE_CHECKING:
    import redis

log = logging.getLogger(__name__)

RUN_LOCK_KEY = "reqdrive:run-lock:{repo}:{requirement}"
# Long enough to ride out a Redis hiccup, short enough that a dead worker's run is free again
# well within the two minutes a crashed run has to be resumed in.
LOCK_TIMEOUT_S = 60.0


class RunLock(Protocol):
    """Held for the whole run; entering refuses (RunLockHeld, a PreflightError) when someone
    else holds it."""

    def held(self) -> AbstractContextManager[None]: ...


class FileRunLock:
    """`reqdrive run` on one machine: the run folder's flock."""

    def __init__(self, folder: RunFolder) -> None:
        self.folder = folder

    def held(self) -> AbstractContextManager[None]:
        return self.folder.lock()


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
