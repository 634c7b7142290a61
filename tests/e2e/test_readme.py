"""The README's documented sequence, as written, in a copy of the repository with nothing beside it.

Install (a fresh venv, `pip install -e .`), the secret into `.env`, `reqdrive up`, then from
another shell `reqdrive replay` of a shipped sample: the commands are read from the README
itself, so the test fails when the README and the product part.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.support.ports import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_S = 600.0  # pip resolves and installs every dependency into the new venv
STOP_TIMEOUT_S = 90.0


def _readme_blocks() -> list[str]:
    """The sh code blocks of the README's "On a fresh machine" section."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## On a fresh machine", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, re.DOTALL)


def _commands(block: str) -> list[str]:
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def _clone(destination: Path) -> None:
    """The repository's files as a fresh clone has them (tracked and new, nothing ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout  # fmt: skip
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def test_the_readme_sequence_works_in_a_clone_with_nothing_beside_it(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # A short path: the embedded Redis's unix socket must fit in 108 bytes.
    clone = tmp_path_factory.mktemp("clone")
    _clone(clone)
    assert not (clone.parent / "shared").exists()
    start_block, replay_block = _readme_blocks()[:2]
    [start_line, test_line] = _commands(start_block)
    [replay_line] = _commands(replay_block)
    assert start_line.endswith(".venv/bin/reqdrive up") and test_line == "scripts/test"

    # The documented port may be taken on a shared machine: the same commands on a free one.
    port = free_port()
    start_line += f" --port {port}"
    replay_line += f" --url http://127.0.0.1:{port}/webhook"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GITHUB_", "REQDRIVE_", "VIRTUAL_ENV", "PYTHON")) and k != "REDIS_URL"
    }
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(ROOT))
    )
    output: list[str] = []
    with subprocess.Popen(
        ["bash", "-c", start_line], cwd=clone, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    ) as up:  # fmt: skip
        assert up.stdout is not None
        stdout = up.stdout
        reader = threading.Thread(target=lambda: output.extend(iter(stdout.readline, "")))
        reader.start()
        try:
            deadline = time.monotonic() + INSTALL_TIMEOUT_S
            while not any("reqdrive is up" in line for line in output):
                assert up.poll() is None, "".join(output)[-4000:]
                assert time.monotonic() < deadline, "".join(output)[-4000:]
                time.sleep(0.5)
            replayed = subprocess.run(
                ["bash", "-c", replay_line], cwd=clone, env=env, capture_output=True, text=True,
                timeout=60, check=False,
            )  # fmt: skip
            # As the README says: worker.log shows the worker taking that job off the queue.
            job_ids = re.findall(r"run-issue-1-[0-9a-f]+", replayed.stdout)
            assert job_ids, replayed.stdout + replayed.stderr
            worker_log = clone / ".reqdrive" / "logs" / "worker.log"
            while not (worker_log.exists() and job_ids[0] in worker_log.read_text()):
                assert time.monotonic() < deadline, replayed.stdout
                time.sleep(0.5)
        finally:
            if up.poll() is None:
                os.killpg(up.pid, signal.SIGINT)  # Ctrl-C, as the README says
            code = up.wait(timeout=STOP_TIMEOUT_S)
            reader.join()

    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    status, _, body = replayed.stdout.partition("\n")
    assert status == "202"
    assert '"job_ids": ["run-issue-1-' in body
    assert code == 0, "".join(output)[-4000:]
    text = "".join(output)
    assert "warning: GITHUB_APP_ID and GITHUB_PRIVATE_KEY" in text  # as the README says
    assert (clone / ".env").read_text().startswith("GITHUB_WEBHOOK_SECRET=")
    assert "job queued" in (clone / ".reqdrive" / "logs" / "web.log").read_text()
