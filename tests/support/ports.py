"""Local TCP ports for tests: one to start a server on, one where nothing ever answers."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


def free_port() -> int:
    """A port free right now, for a server the test starts next (the kernel's next pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def closed_port() -> Iterator[int]:
    """A port that refuses every connection while the block runs: bound, never listening.

    Held bound, so a server another test starts in parallel (pytest -n) cannot take it and
    answer where the test expects a dead Redis or an unreachable URL.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])
