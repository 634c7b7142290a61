"""`reqdrive serve` as the Procfile runs it logs JSON lines only: the server's and ours."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support import webhooks
from tests.support.ports import free_port

pytestmark = pytest.mark.e2e

REQDRIVE = str(Path(sys.executable).parent / "reqdrive")
START_TIMEOUT_S = 60.0


def _lines_of(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.strip()]


def test_every_line_of_the_production_web_process_is_json_with_ids(
    redis_url: str, tmp_path: Path
) -> None:
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "REQDRIVE_"))},
        "GITHUB_WEBHOOK_SECRET": webhooks.SECRET,
        "REDIS_URL": redis_url,
        "WEB_CONCURRENCY": "1",
    }
    log = tmp_path / "web.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [REQDRIVE, "serve", "--port", str(port)], env=env, stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        # granian 2.8 can hang on SIGTERM while a worker starts: stop it only once one has.
        while "Started worker" not in log.read_text():
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        body = webhooks.labeled()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/webhook",
            data=body,
            headers=webhooks.headers("issues", body, delivery_id="d-serve-1"),
        )
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - local
            job_id = json.loads(response.read())["job_ids"][0]
        while "job queued" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)

    entries = [json.loads(line) for line in _lines_of(log)]  # every line, granian's included
    assert any(
        e["logger"].startswith("_granian") and "Started worker" in e["message"] for e in entries
    ), entries
    [queued] = [e for e in entries if e["message"] == "job queued"]
    assert (queued["delivery_id"], queued["job_id"]) == ("d-serve-1", job_id)
    assert all(e["time"].endswith("Z") for e in entries)
