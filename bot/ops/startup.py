"""Checks `up`, `serve` and `worker` make before starting anything, each a message, not a trace."""

from __future__ import annotations

import argparse
import errno
import os
import socket
from pathlib import Path

from bot.exceptions import ConfigurationError
from bot.ops.embedded_redis import redis_answers, redis_wants_password
from bot.ops.settings import Settings
from worker.confine.file_lock import FileLock
from worker.exceptions import FileLockHeld

LOCK_FILE = "up.lock"
RUNS_AS_ROOT = (
    "reqdrive worker runs as root: the sandbox maps each agent to an unprivileged uid, but this "
    "process holds the App's private key and runs git and the gates itself; run it as a "
    "service user of its own (docs/operations.md, User=reqdrive)"
)


def port_number(text: str) -> int:
    """An argparse type: a TCP port a server can listen on, 1-65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number (1-65535)")
    return port


def ensure_port_free(host: str, port: int) -> None:
    """Refuse, naming the address, when nothing can listen on it (in use, or not ours)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As the web server binds: a port left in TIME_WAIT by a stopped server is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigurationError(
                    f"port {port} on {host} is already in use (another reqdrive, or another "
                    "server); stop it or choose another with --port"
                ) from None
            raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def ensure_redis_answers(url: str, *, configured: bool, command: str) -> None:
    """Refuse when the Redis the process would use does not answer, saying what to do."""
    if redis_answers(url):
        return
    # The URL is named, not printed: it may carry a password.
    if redis_wants_password(url):
        raise ConfigurationError(
            "the Redis at REDIS_URL refused its password (NOAUTH or WRONGPASS): give the one "
            "the server requires, redis://:PASSWORD@HOST:6379/0 or unix://:PASSWORD@/PATH/TO/"
            "redis.sock (docs/operations.md)"
        )
    if not configured:
        raise ConfigurationError(
            f"no Redis answers at the default {url}: start one there, or set REDIS_URL"
        )
    hint = (
        "; or unset REDIS_URL and `reqdrive up` starts an embedded Redis of its own"
        if command == "up"
        else ""
    )
    raise ConfigurationError(
        f"the Redis at REDIS_URL does not answer: start it or correct REDIS_URL{hint}"
    )


def root_warning() -> str | None:
    """The warning a worker gives when it runs as root (effective uid 0), else None."""
    return RUNS_AS_ROOT if os.geteuid() == 0 else None


def app_credentials_problem(settings: Settings) -> tuple[bool, str] | None:
    """(fatal, message) when the App's identity is missing or half given; None when complete.

    Without an App id and key the web process still verifies and queues deliveries, but no job
    can reach GitHub; half of it, or a key file that cannot be read, is a mistake.
    """
    has_id = settings.github_app_id is not None
    has_key = settings.github_private_key is not None or settings.github_private_key_path
    path = settings.github_private_key_path
    if path is not None and not os.access(path, os.R_OK):
        return True, f"GITHUB_PRIVATE_KEY_PATH names a file that cannot be read: {path}"
    if has_id and not has_key:
        return True, "GITHUB_APP_ID is set but no key: set GITHUB_PRIVATE_KEY or its _PATH"
    if has_key and not has_id:
        return True, "a private key is set but not GITHUB_APP_ID: set the App's id too"
    if not has_id:
        return False, (
            "GITHUB_APP_ID and GITHUB_PRIVATE_KEY (or GITHUB_PRIVATE_KEY_PATH) are not set: "
            "deliveries are verified and queued, but no job can reach GitHub until they are "
            "(docs/configuration.md)"
        )
    return None


class StackLock:
    """`<work dir>/up.lock`, held while one `reqdrive up` runs there; it names that up's pid."""

    def __init__(self, work_dir: Path) -> None:
        self._lock = FileLock(work_dir / LOCK_FILE)
        self.path = self._lock.path

    def acquire(self, description: str) -> None:
        """Take the lock or refuse, naming the running stack."""
        try:
            self._lock.acquire(f"pid {os.getpid()}, {description}")
        except FileLockHeld as held:
            raise ConfigurationError(
                f"reqdrive up is already running in this folder ({held.holder}); it owns "
                f"{self.path.parent}. Use that one, stop it first, or start another in a "
                "different folder (or with another REQDRIVE_WORK_DIR)"
            ) from None

    def release(self) -> None:
        self._lock.release()
