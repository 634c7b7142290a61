"""Scripted stand-ins for coding-agent CLIs, installed as real executables for a test."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def install(bin_dir: Path, name: str, script: str) -> Path:
    """Write script (a file here) to bin_dir/name as an executable run by this interpreter.

    The interpreter is named in the shebang, so the fake runs under an agent's scrubbed
    environment, where a pyenv shim or a venv on PATH would not.
    """
    bin_dir.mkdir(parents=True, exist_ok=True)
    target = bin_dir / name
    target.write_text(f"#!{sys.executable}\n" + (HERE / script).read_text())
    target.chmod(0o755)
    return target
