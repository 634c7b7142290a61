"""Checkpoints of local runs: a file in the run's folder, replaced atomically."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from worker.model.state import Checkpoint

CHECKPOINT_FILE = "checkpoint.json"


class FileCheckpointStore:
    """Checkpoints as runs/<run-id>/checkpoint.json, replaced atomically so a kill mid-write
    leaves the previous checkpoint intact."""

    def __init__(self, runs_dir: Path) -> None:
        self._runs_dir = runs_dir

    def path(self, run_id: str) -> Path:
        return self._runs_dir / run_id / CHECKPOINT_FILE

    def load(self, run_id: str) -> Checkpoint | None:
        path = self.path(run_id)
        if not path.exists():
            return None
        return Checkpoint.model_validate_json(path.read_text())

    def save(self, checkpoint: Checkpoint) -> None:
        checkpoint.updated_at = time.time()
        path = self.path(checkpoint.run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with tmp.open("w") as handle:
                handle.write(checkpoint.model_dump_json(indent=2))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
