"""App authentication: installation tokens for one repository, cached until near expiry."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from github import Auth, GithubIntegration
from github.InstallationAuthorization import InstallationAuthorization

# What each kind of job may do with its token. A token names only these, so a job that only
# replies to a comment can never push, whatever it is tricked into.
RUN_PERMISSIONS: Mapping[str, str] = {
    "contents": "write",  # clone, push reqdrive/<slug>, read .github/reqdrive.yml
    "pull_requests": "write",
    "issues": "write",  # 👀, the progress comment
    "checks": "write",
    "metadata": "read",  # collaborator permission, default branch
}
# A CI fix is a run that also reads CI: its workflow runs, jobs and logs (actions), and
# other Apps' check suites, check runs and annotations (checks, written for its own).
CI_PERMISSIONS: Mapping[str, str] = {**RUN_PERMISSIONS, "actions": "read"}
REPLY_PERMISSIONS: Mapping[str, str] = {
    "contents": "read",  # the repository's config, the PR's branch
    "pull_requests": "write",  # a reply on a pull request is an issue comment on it
    "issues": "write",
    "metadata": "read",
}
# A token lasts an hour; one this close to its end is replaced, so a clone or push that takes
# a few minutes never starts with a token about to run out.
REFRESH_MARGIN = timedelta(minutes=10)

TokenKey = tuple[int, str, tuple[tuple[str, str], ...]]


# Why the cache is per process and not in Redis: RQ forks a work horse per job, so each job
# mints its own token (one POST per job and permission set, plus one per hour of a long run).
# That call is cheap next to any job and counts against the App's own rate limit (its JWT's),
# which a worker's jobs an hour stay far below. A shared store would put live, writable
# credentials in Redis, where the web process (which never needs one), every Redis replica,
# snapshot and backup, and anyone holding REDIS_URL could read them; a token living only in
# the memory of the job that asked for it, scoped to one repository, is the smaller exposure.
# docs/operations.md says the same.
class AppAuth:
    """The App's identity: repository-scoped installation tokens, cached per process."""

    def __init__(
        self, app_id: int, private_key: str, *, base_url: str, timeout_s: float = 15.0
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._integration = GithubIntegration(
            auth=Auth.AppAuth(app_id, private_key),
            base_url=self.base_url,
            timeout=int(timeout_s),
        )
        self._tokens: dict[TokenKey, InstallationAuthorization] = {}
        self._lock = threading.Lock()

    def token(self, installation_id: int, repo: str, permissions: Mapping[str, str]) -> str:
        """A token for `repo` ("owner/name") alone with `permissions` alone; fresh or cached."""
        key = (installation_id, repo.lower(), tuple(sorted(permissions.items())))
        with self._lock:
            cached = self._tokens.get(key)
            if cached is None or _expiring(cached):
                cached = self._create(installation_id, repo, permissions)
                self._tokens[key] = cached
            return cached.token

    def drop_installation(self, installation_id: int) -> int:
        """Forget every token of an installation (it was uninstalled); how many were dropped."""
        with self._lock:
            gone = [key for key in self._tokens if key[0] == installation_id]
            for key in gone:
                del self._tokens[key]
        return len(gone)

    def _create(
        self, installation_id: int, repo: str, permissions: Mapping[str, str]
    ) -> InstallationAuthorization:
        # GithubIntegration.get_access_token sends only `permissions`; GitHub's endpoint also
        # takes `repositories`, which narrows the token to the one repository a job serves.
        # The request goes through the integration's own requester (JWT, retries, base URL).
        name = repo.split("/", 1)[1]
        requester = self._integration.requester
        headers, data = requester.requestJsonAndCheck(
            "POST",
            f"/app/installations/{installation_id}/access_tokens",
            input={"repositories": [name], "permissions": dict(permissions)},
            headers={"Accept": "application/vnd.github+json"},
        )
        return InstallationAuthorization(requester, headers, data)


def _expiring(authorization: InstallationAuthorization) -> bool:
    expires_at: datetime = authorization.expires_at
    return expires_at - REFRESH_MARGIN <= datetime.now(UTC)
