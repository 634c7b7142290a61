"""A run's folders beside its worktree that the agent and its gates write: swept, then removed."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from worker.confine.leftovers import Leftovers, sweep
from worker.confine.safe_paths import remove_tree

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunScratch:
    """The agent's HOME, the gates' HOMEs, the hand-over folder and the agent's git view; and
    the worker's bytecode of the worktree's modules, which goes with the run."""

    home: Path
    gate_homes: Path
    handoff: Path
    git_view: Path
    bytecode: Path

    @property
    def folders(self) -> tuple[Path, ...]:
        """What the agent and its gates write: swept after each call and gate."""
        return (self.home, self.gate_homes, self.handoff, self.git_view)

    def sweep(self, worktree: Path) -> Leftovers:
        """After an agent call or a round of gates, before the worker reads, commits or parks
        anything: the worktree and these folders made harmless (leftovers.sweep)."""
        return sweep([worktree, *self.folders])

    def start_over(self, worktree: Path) -> None:
        """Before a run, under its lock: what a killed worker left (a call it never swept
        after) made harmless in the worktree and removed here."""
        sweep([worktree])
        self.remove()

    def remove(self) -> None:
        """When the run ends, whatever its end: nothing of the agent's stays on the disk but
        the worktree (kept for a resume, or parked clean). A folder that will not go is
        logged, never raised: the run's own ending matters more."""
        for folder in (*self.folders, self.bytecode):
            try:
                remove_tree(folder)
            except OSError as error:
                LOG.warning(
                    "run folder left on disk", extra={"path": str(folder), "error": str(error)}
                )
