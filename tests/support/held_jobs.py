"""Job functions for status tests: one that reports a story and waits to be released, one that
fails. Run by real `rq worker` processes (importable as tests.support.held_jobs)."""

from __future__ import annotations

import time
from pathlib import Path

from rq import get_current_job


def hold(release_file: str, repo: str, story: str) -> str:
    """Say which run and story this is, as reqdrive's jobs do, then wait for the test."""
    job = get_current_job()
    assert job is not None
    job.meta.update(
        {
            "repo": repo,
            "run_id": "req-001-export-0123456789ab",
            "requirement": "docs/requirements/REQ-001-export.md",
            "step": "implement",
            "story": story,
            "story_started_at": time.time() - 125,  # two minutes into the story
        }
    )
    job.save_meta()  # type: ignore[no-untyped-call]  # rq leaves save_meta unannotated
    deadline = time.monotonic() + 120
    while not Path(release_file).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return "released"


def fail(repo: str) -> None:
    raise RuntimeError(f"the agent could not be started for {repo}")
