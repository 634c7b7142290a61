"""Red CI on each reqdrive pull request: its fix attempts, its hand-off, what was said once.

Keyed by repository and pull request number, so whatever acts on a pull request (the ci_fix
job, a person's push, `/reqdrive fix`) finds the same state. `/reqdrive fix` calls
`CiFixes.clear(repo, pull)`: the hand-off is lifted, the attempts start again from 0.
"""

from __future__ import annotations

import redis

STATE_KEY = "reqdrive:ci:{repo}:{pull}"  # hash: attempts, handed_off, said:<what>
HEAD_KEY = "reqdrive:ci-head:{repo}:{pull}:{sha}"  # one CI-fix decision per head commit
STATE_TTL_S = 30 * 24 * 3600  # as long as run records live


class CiFixes:
    """The CI-fix state of pull requests, in Redis, shared by every worker."""

    def __init__(self, conn: redis.Redis) -> None:
        self.conn = conn

    def _key(self, repo: str, pull: int) -> str:
        return STATE_KEY.format(repo=repo.lower(), pull=pull)

    def claim_head(self, repo: str, pull: int, sha: str) -> bool:
        """True once per head commit: a workflow run and its check suite (or two workflows)
        failing on one commit are one CI-fix decision, not two attempts."""
        key = HEAD_KEY.format(repo=repo.lower(), pull=pull, sha=sha)
        return bool(self.conn.set(key, "1", nx=True, ex=STATE_TTL_S))

    def attempts(self, repo: str, pull: int) -> int:
        value = self.conn.hget(self._key(repo, pull), "attempts")
        return int(value) if value is not None else 0

    def add_attempt(self, repo: str, pull: int) -> int:
        """One more CI-fix run started on this pull request; the count now."""
        key = self._key(repo, pull)
        pipe = self.conn.pipeline()
        pipe.hincrby(key, "attempts", 1)
        pipe.expire(key, STATE_TTL_S)
        count, _ = pipe.execute()
        return int(count)

    def give_back(self, repo: str, pull: int, sha: str) -> int:
        """A CI-fix run that never reached its story: its attempt is not counted, and the
        head may be taken up again (CI run again on it). The count now."""
        key = self._key(repo, pull)
        head = HEAD_KEY.format(repo=repo.lower(), pull=pull, sha=sha)
        count = int(self.conn.hincrby(key, "attempts", -1))
        if count < 0:  # cleared (`/reqdrive fix`) while it ran: nothing to give back
            self.conn.hset(key, "attempts", 0)
            count = 0
        self.conn.delete(head)
        return count

    def hand_off(self, repo: str, pull: int, who: str) -> None:
        """A person pushed to the branch: the pull request is theirs from now on."""
        key = self._key(repo, pull)
        pipe = self.conn.pipeline()
        pipe.hset(key, "handed_off", who)
        pipe.hdel(key, "said:handed_off")  # a new hand-off is said again, once
        pipe.expire(key, STATE_TTL_S)
        pipe.execute()

    def handed_off(self, repo: str, pull: int) -> str | None:
        """Who the pull request was handed to (the pusher's login), or None."""
        value = self.conn.hget(self._key(repo, pull), "handed_off")
        return value.decode() if isinstance(value, bytes) else value

    def say_once(self, repo: str, pull: int, what: str) -> bool:
        """True the first time `what` is to be said on this pull request, then False."""
        key = self._key(repo, pull)
        said = bool(self.conn.hsetnx(key, f"said:{what}", "1"))
        self.conn.expire(key, STATE_TTL_S)
        return said

    def clear(self, repo: str, pull: int) -> None:
        """`/reqdrive fix`: reqdrive may fix this pull request's CI again, with fresh attempts."""
        self.conn.delete(self._key(repo, pull))
