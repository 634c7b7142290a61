"""`reqdrive up`'s own Redis: a unix socket only its user can open, and a password per start."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import redis

from bot.exceptions import ConfigurationError
from bot.ops.embedded_redis import EmbeddedRedis
from bot.ops.startup import ensure_redis_answers


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path / "redis", append_only=False)
    server.start()
    yield server
    server.stop()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_client_without_the_password_is_refused_and_one_with_it_served(
    embedded: EmbeddedRedis,
) -> None:
    anonymous = redis.Redis(unix_socket_path=str(embedded.socket_path))
    with pytest.raises(redis.AuthenticationError):
        anonymous.set("reqdrive:probe", "1")
    wrong = redis.Redis(unix_socket_path=str(embedded.socket_path), password="guess")
    with pytest.raises(redis.AuthenticationError):
        wrong.ping()
    assert redis.Redis.from_url(embedded.url).set("reqdrive:probe", "1")


def test_only_its_user_can_open_the_socket_and_read_the_password(
    embedded: EmbeddedRedis,
) -> None:
    assert _mode(embedded.directory) == 0o700
    assert _mode(embedded.socket_path) == 0o600
    assert _mode(embedded.password_path) == 0o600
    assert _mode(embedded.directory / "redis.conf") == 0o600


def test_it_listens_on_the_socket_only_and_the_password_is_on_no_command_line(
    embedded: EmbeddedRedis,
) -> None:
    assert embedded.process is not None
    server = psutil.Process(embedded.process.pid)
    assert server.net_connections(kind="inet") == []  # no TCP or UDP socket at all
    assert redis.Redis.from_url(embedded.url).config_get("port") == {"port": "0"}
    password = embedded.password_path.read_text().strip()
    assert len(password) >= 32
    assert not any(password in argument for argument in server.cmdline())


def test_each_start_has_a_new_password(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "redis", append_only=False)
    first = server.start()
    server.stop()
    second = server.start()
    try:
        assert first != second
        with pytest.raises(redis.AuthenticationError):
            redis.Redis.from_url(first).ping()
    finally:
        server.stop()


def test_a_redis_url_without_the_password_is_refused_saying_so(embedded: EmbeddedRedis) -> None:
    with pytest.raises(ConfigurationError, match="refused its password") as error:
        ensure_redis_answers(f"unix://{embedded.socket_path}", configured=True, command="worker")
    assert embedded.password_path.read_text().strip() not in str(error.value)
    ensure_redis_answers(embedded.url, configured=True, command="worker")  # no refusal
