"""A repository's prompt template rendered in a child process bounded in time, memory and size.

Jinja2's sandbox stops a template from reaching Python's internals, but not from looping or
allocating without end: `{% for a in range(99999) %}{% for b in range(99999) %}` or
`{{ "x" * 10**10 }}` would hold the worker. The child has a CPU-time and an address-space
limit, the parent a wall-clock deadline, and the output stops at MAX_OUTPUT_CHARS.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from worker.plan.template_env import override_environment

MAX_OUTPUT_CHARS = 1_000_000  # a prompt is a few KiB; a model takes a few hundred KiB at most
FAILED = 3  # the child's exit code when the template itself is wrong; stderr says why


@dataclass(frozen=True)
class RenderLimits:
    """What one render of a repository's template may use."""

    cpu_s: int = 10
    wall_s: float = 30.0  # spawning Python on a busy machine is part of it
    memory_bytes: int = 512 * 1024 * 1024


class OverrideError(Exception):
    """The template could not be rendered; the message says why in a reader's words."""


def render_override(
    templates: Mapping[str, str],
    name: str,
    values: Mapping[str, Any],
    limits: RenderLimits = RenderLimits(),
) -> str:
    """Render templates[name] with values (plain JSON data) in a bounded child process."""
    request = {
        "templates": dict(templates),
        "name": name,
        "values": values,
        "limits": dataclasses.asdict(limits),
    }
    package_root = str(Path(__file__).resolve().parents[2])
    try:
        done = subprocess.run(
            [sys.executable, "-m", "worker.plan.override_render"],
            input=json.dumps(request, default=str).encode(),
            capture_output=True,
            timeout=limits.wall_s,
            # Nothing of the worker's environment (tokens, Redis URL) reaches the child.
            env={"PYTHONPATH": package_root, "PYTHONIOENCODING": "utf-8"},
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise OverrideError(
            f"it did not finish within {limits.wall_s:g}s (a loop without end?)"
        ) from None
    if done.returncode == 0:
        return done.stdout.decode("utf-8")
    if done.returncode == FAILED:
        raise OverrideError(done.stderr.decode("utf-8", errors="replace").strip()[:2000])
    if done.returncode == -signal.SIGXCPU or done.returncode == -signal.SIGKILL:
        raise OverrideError(f"it used more than {limits.cpu_s}s of CPU time (a loop too large?)")
    raise OverrideError(
        f"the renderer stopped with exit code {done.returncode}: "
        + done.stderr.decode("utf-8", errors="replace").strip()[-500:]
    )


def _render(request: Mapping[str, Any], write: Callable[[str], object]) -> None:
    env = override_environment(request["templates"])
    template = env.get_template(request["name"])
    size = 0
    for chunk in template.generate(**request["values"]):
        size += len(chunk)
        if size > MAX_OUTPUT_CHARS:
            raise OverrideError(f"its output is longer than {MAX_OUTPUT_CHARS} characters")
        write(chunk)


def _child() -> int:
    request = json.loads(sys.stdin.buffer.read())
    limits = RenderLimits(**request["limits"])
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    chunks: list[str] = []
    try:
        _render(request, chunks.append)
    except jinja2.TemplateError as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return FAILED
    except OverrideError as exc:
        print(str(exc), file=sys.stderr)
        return FAILED
    except MemoryError:
        print(f"it needed more than {limits.memory_bytes // 2**20} MiB of memory", file=sys.stderr)
        return FAILED
    except RecursionError:
        print("it recurses too deeply (a macro calling itself?)", file=sys.stderr)
        return FAILED
    except (ArithmeticError, TypeError, ValueError) as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return FAILED
    sys.stdout.write("".join(chunks))
    return 0


if __name__ == "__main__":
    os.umask(0o077)
    sys.exit(_child())
