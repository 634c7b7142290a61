"""What a gate runs with: the worker's variables it may see, a HOME of its own and a results
folder of the worker's, new for each gate run and removed when it ends."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from worker.confine.safe_paths import remove_tree
from worker.confine.sandbox import Sandbox

# What a gate sees of the worker's environment: enough to find its tools, never a
# credential (the agent's API key included: the checks do not need it).
GATE_VARIABLES = frozenset({"PATH", "LANG", "TZ", "TERM"})
GATE_PREFIXES = ("LC_",)
# The certificates the worker's pip, npm, curl and Python were told to trust (a TLS-inspecting
# proxy's CA): without them the setup's installs fail on the registry's certificate. Paths, no
# credential; the sandbox shows /etc/ssl (a bundle elsewhere stays unseen in there).
TRUST_VARIABLES = frozenset(
    {
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "PIP_CERT",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "NPM_CONFIG_CAFILE",
        "CARGO_HTTP_CAINFO",
    }
)


def gate_environment(
    home: Path, source_env: Mapping[str, str], *, path: str | None = None
) -> dict[str, str]:
    """The gates' environment: a few variables of the worker's (locale, the certificates to
    trust), HOME and TMPDIR of their own, and PATH as the operator chose it (`path`), so
    `python` is the interpreter they meant."""
    env = {
        name: value
        for name, value in source_env.items()
        if name in GATE_VARIABLES or name in TRUST_VARIABLES or name.startswith(GATE_PREFIXES)
    }
    if path:
        env["PATH"] = path
    env.setdefault("PATH", os.defpath)
    tmp = home / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env["HOME"] = str(home)
    env["TMPDIR"] = str(tmp)
    return env


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
