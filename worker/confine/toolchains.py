"""The toolchains the gates' commands start, found on the host and shown to their sandbox."""

from __future__ import annotations

import logging
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from worker.confine.sandbox import tool_paths

LOG = logging.getLogger(__name__)

# The sandbox shows /usr (and the merged-/usr links) anyway.
SYSTEM = Path("/usr")
PYTHON_RE = re.compile(r"python[0-9.]*")
NODE_TOOLS = frozenset({"node", "npm", "npx", "nodejs"})
# Words after which a shell segment's program is still to come, and builtins that start none.
LEADING_WORDS = frozenset({"!", "if", "then", "else", "elif", "do", "while", "until", "{", "time"})
BUILTINS = frozenset(
    {
        "[",
        "[[",
        "cd",
        "export",
        "set",
        "test",
        "true",
        "false",
        "echo",
        "exit",
        "fi",
        "done",
        "esac",
        "}",
    }
)
# Asked of an interpreter on the host: `-I` keeps the repository's files (cwd) off its path.
PREFIXES = "import sys; print(sys.prefix); print(sys.base_prefix); print(sys.executable)"
ASK_TIMEOUT_S = 20.0
SHEBANG_DEPTH = 3  # a script whose interpreter is a script (a venv's `pytest`, pyenv's shim)


@dataclass(frozen=True)
class Toolchains:
    """Folders the gates' sandbox shows read-only, and the interpreters' own `bin` folders
    that go first on the gates' PATH where PATH finds a wrapper (a pyenv or asdf shim, which
    needs the version manager itself to start): what `pyenv exec` would put there."""

    folders: tuple[Path, ...] = ()
    path_first: tuple[Path, ...] = ()

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """`env` with the interpreters behind shims first on PATH."""
        if not self.path_first:
            return dict(env)
        front = ":".join(str(p) for p in self.path_first)
        return {**env, "PATH": f"{front}:{env.get('PATH', '')}".rstrip(":")}


def command_tools(command: str) -> list[str]:
    """The programs a gate's command starts: the first word of each of its shell segments
    (`python -m pytest && npx vitest` → python, npx), variable assignments skipped."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:  # unbalanced quotes: bash will say so itself
        words = command.split()
    tools: list[str] = []
    starts = True
    for word in words:
        if word and set(word) <= set("&|;()<>"):
            starts = True
            continue
        if starts and "=" in word and not word.startswith("="):
            continue  # FOO=1 pytest
        if starts and word in LEADING_WORDS:
            continue
        if starts and word not in BUILTINS and word not in tools:
            tools.append(word)
        starts = False
    return tools


def find_toolchains(
    commands: Iterable[str],
    env: Mapping[str, str],
    *,
    keep_out: Sequence[Path],
    private: Sequence[Path] = (),
) -> Toolchains:
    """What the gates' sandbox must show for these commands to start as they do on the host
    with `env`'s PATH. Nothing in or above `keep_out` (the work dir: the agent writes there)
    is run on the host or shown; no folder holding a `private` one (the worker's HOME) is
    shown; `/usr` is shown anyway."""
    finder = _Finder(env, tuple(keep_out), tuple(private))
    folders: dict[Path, None] = {}
    for command in commands:
        for tool in command_tools(command):
            folders.update(dict.fromkeys(finder.folders(tool)))
    shown = tuple(f for f in folders if not _covered(f, folders))
    if shown:
        LOG.info(
            "the checks' sandbox shows these toolchains", extra={"folders": [*map(str, shown)]}
        )
    return Toolchains(shown, tuple(finder.first))


def real_prefixes(tool: str, env: Mapping[str, str], keep_out: Sequence[Path]) -> list[Path]:
    """The folders `tool` needs visible, as `env`'s PATH finds it on the host (empty when
    PATH does not find it, or it lives in /usr)."""
    folders = dict.fromkeys(_Finder(env, tuple(keep_out), ()).folders(tool))
    return [f for f in folders if not _covered(f, folders)]


@dataclass
class _Finder:
    """Finds one tool's folders; remembers the interpreters found behind wrappers."""

    env: Mapping[str, str]
    keep_out: tuple[Path, ...]
    private: tuple[Path, ...]
    first: dict[Path, None] = field(default_factory=dict)

    def folders(self, tool: str, depth: int = SHEBANG_DEPTH) -> list[Path]:
        path_var = self.env.get("PATH", "")
        # Only what the operator's PATH finds, or a script found there names as its
        # interpreter: a path in the repository's config could name any folder of the host.
        by_path = "/" not in tool
        if depth <= 0 or not (by_path or depth < SHEBANG_DEPTH):
            return []
        found = shutil.which(tool, path=path_var) if by_path else tool
        if found is None or not Path(found).is_absolute():
            return []  # a relative PATH entry: nothing the operator chose
        where = Path(found)
        if not self._may_run(where):
            return []
        folders = [] if _visible(where) else tool_paths(str(where), path_var)
        name = where.resolve().name
        if PYTHON_RE.fullmatch(where.name) or PYTHON_RE.fullmatch(name):
            folders += self._python_prefixes(where)
        elif where.name in NODE_TOOLS or name in NODE_TOOLS:
            folders += _node_prefix(where)
        interpreter = _shebang(where)
        if interpreter is not None:
            folders += self.folders(interpreter, depth - 1)
        return [f for f in folders if not _visible(f) and self._may_show(f)]

    def _python_prefixes(self, where: Path) -> list[Path]:
        """A Python's prefix and base prefix (a venv needs both), asked of the interpreter;
        when PATH finds a wrapper, the real interpreter's folder goes first on the PATH."""
        env = {"PATH": self.env.get("PATH", ""), "HOME": self.env.get("HOME", "/")}
        try:
            done = subprocess.run(
                [str(where), "-I", "-c", PREFIXES],
                env=env,
                cwd="/",
                capture_output=True,
                text=True,
                timeout=ASK_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return []
        lines = done.stdout.splitlines()
        if done.returncode != 0 or len(lines) != 3:
            return []
        prefix, base, executable = (Path(line) for line in lines)
        wrapped = executable.is_absolute() and executable.resolve() != where.resolve()
        if wrapped and self._may_show(executable.parent):
            self.first.setdefault(executable.parent)
        return [prefix, base]

    def _may_run(self, path: Path) -> bool:
        """Not a file the agent could have written: nothing under the work dir."""
        return not any(
            p.is_relative_to(k) for p in (path.absolute(), path.resolve()) for k in self.keep_out
        )

    def _may_show(self, folder: Path) -> bool:
        """Neither `/`, nor in or above the work dir, nor above the worker's HOME."""
        shown = (folder.absolute(), folder.resolve())
        above = (*self.keep_out, *self.private)
        return (
            self._may_run(folder)
            and Path("/") not in shown
            and not any(k.is_relative_to(p) for p in shown for k in above)
        )


def _node_prefix(where: Path) -> list[Path]:
    """Node's install: its real binary's `bin` folder's parent, lib/node_modules included."""
    real = where.resolve()
    return [real.parent.parent] if real.parent.name == "bin" else [real.parent]


def _shebang(path: Path) -> str | None:
    """The interpreter a script names (`#!/venv/bin/python`, `#!/usr/bin/env node`)."""
    try:
        with path.open("rb") as script:
            line = script.readline(512)
    except OSError:
        return None
    if not line.startswith(b"#!"):
        return None
    words = line[2:].decode(errors="replace").split()
    if not words:
        return None
    if Path(words[0]).name == "env":
        named = [w for w in words[1:] if not w.startswith("-")]
        return named[0] if named else None
    return words[0]


def _visible(path: Path) -> bool:
    return path.resolve().is_relative_to(SYSTEM)


def _covered(folder: Path, folders: Iterable[Path]) -> bool:
    return any(other != folder and folder.is_relative_to(other) for other in folders)
