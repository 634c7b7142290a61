"""A HOME of each gate's own, and a results folder of the worker's: new for each gate run,
removed when it ends."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from worker.confine.safe_paths import remove_tree
from worker.confine.sandbox import Sandbox


@contextmanager
def own_home(
    homes: Path | None, env: Mapping[str, str], sandbox: Sandbox | None
) -> Iterator[tuple[dict[str, str], Sandbox | None]]:
    """The gate's environment and sandbox with a fresh HOME (TMPDIR inside) under `homes`, the
    only one bound writable into its sandbox. Tools read their user configuration there
    (Python's user site-packages, `~/.npmrc`, `~/.gitconfig`) and the gate may leave anything
    (a link in place of TMPDIR): no other gate, parallel or later, and not the worker, meets
    it. None: env and sandbox as given."""
    if homes is None:
        yield dict(env), sandbox
        return
    homes.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="gate-", dir=homes))  # unique among parallel gates
    try:
        (home / "tmp").mkdir()
        bound = None if sandbox is None else sandbox.bind(writable=[home])
        yield {**env, "HOME": str(home), "TMPDIR": str(home / "tmp")}, bound
    finally:
        remove_tree(home)


@contextmanager
def results_folder() -> Iterator[Path]:
    """An empty folder of the worker's, outside the worktree, where the reporters it adds to
    one gate run write (bound writable into the gate's sandbox by the caller); removed after.
    The gate can write it too: what it holds is read through copies, never through links."""
    folder = Path(tempfile.mkdtemp(prefix="reqdrive-results-"))
    try:
        yield folder
    finally:
        remove_tree(folder)
