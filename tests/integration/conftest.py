"""Fixtures the sandboxed pipeline tests share: the scripted agent's folder and its sandbox."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from worker.confine.sandbox import Sandbox, SandboxMode, make_sandbox

SUPPORT = Path(__file__).resolve().parents[1] / "support"


@pytest.fixture
def agent_io(tmp_path: Path) -> Path:
    """The scripted agent's scenario and call log: the one test-only folder it may write."""
    folder = tmp_path / "agent-io"
    folder.mkdir()
    return folder


@pytest.fixture
def sandbox(agent_io: Path) -> Sandbox:
    """The App's sandbox showing what the scripted agent itself needs (its interpreter, which
    also runs the gates' pytest in the tests that rely on it) and nothing else."""
    app = make_sandbox(SandboxMode.ON, readonly=[Path(sys.prefix), Path(sys.base_prefix), SUPPORT])
    assert app is not None
    return app.bind(writable=[agent_io])
