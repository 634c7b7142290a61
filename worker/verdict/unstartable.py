"""A check that cannot start (its program or its runner missing), told apart from a failing one."""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from worker.confine.sandbox import tool_paths
from worker.confine.toolchains import real_prefixes
from worker.model.gates import GateResult

COMMAND_NOT_FOUND = 127  # bash: the program is nowhere on PATH
NOT_EXECUTABLE = 126  # bash: found, but it cannot be run
# What bash and dash say before those exit codes: `bash: line 1: python: command not found`,
# `sh: 1: vitest: not found`, `bash: /opt/x: Permission denied`.
SHELL_SAYS = r"^(?:\S*/)?(?:ba|da)?sh: (?:line [0-9]+: |[0-9]+: )?(?P<name>[^:\n]+): "
NOT_FOUND_RE = re.compile(
    SHELL_SAYS + r"(?:command not found|not found|No such file or directory)$", re.M
)
NOT_EXECUTABLE_RE = re.compile(SHELL_SAYS + r"(?:Permission denied|cannot execute.*)$", re.M)
# Python's `-m` when the runner is not installed for that interpreter (not a test's own
# ModuleNotFoundError, which is quoted inside a traceback): `/usr/bin/python3: No module
# named pytest`, or for a dotted name `...: Error while finding module specification for 'a.b'`.
NO_RUNNER_RE = re.compile(
    r"^(?P<python>\S+): (?:No module named (?P<module>[\w.]+)"
    r"|Error while finding module specification for '(?P<dotted>[\w.]+)')",
    re.M,
)
NODE_MODULE_RE = re.compile(r"Cannot find module '(?P<module>[^']+)'")
# Commands whose scripts start programs from the project's node_modules/.bin.
NODE_RUNNERS = frozenset({"npm", "npx", "yarn", "pnpm"})
NODE_FIX = (
    "install the project's dependencies in the worktree so node_modules has it (`setup: npm "
    "ci` in .github/reqdrive.yml, `npm install` without a package-lock.json; the worktree "
    "starts without node_modules, whatever your checkout has), or add it (`npm install "
    "--save-dev PACKAGE`)"
)
NPX_RE = re.compile(
    r"npm (?:ERR!|error) could not determine executable to run|^npx: .*not found", re.M
)
# npx asked for a package the worktree does not have: the checks run with npm_config_yes=false
# (run/calls.py), so it refuses to download it, or it could not reach the registry to try.
# Either way the project's own runner is missing; npx would otherwise run the newest
# version of it, whatever major the project pins.
NPX_DOWNLOAD_RE = re.compile(
    r'npx canceled due to missing packages and no YES option: \["(?P<wanted>[^"]+)"'
    r"|npm (?:ERR!|error) FetchError: request to \S+/(?P<fetched>[^/\s]+) failed"
)


@dataclass(frozen=True)
class Unstartable:
    """Why a gate never ran its checks, and what the operator does about it."""

    gate: str
    command: str
    missing: str
    fix: str

    def sentence(self) -> str:
        return (
            f"the {self.gate} check cannot start (`{self.command}`): {self.missing}; "
            f"fix: {self.fix}"
        )


@dataclass(frozen=True)
class GatePlace:
    """Where the gates run: in the sandbox or not, their PATH, the worker's own PATH, and
    the work dir (never suggested as a toolchain: the agent writes there)."""

    sandboxed: bool
    gate_path: str
    worker_path: str
    keep_out: Sequence[Path]


def cannot_start(result: GateResult, place: GatePlace) -> Unstartable | None:
    """Why this gate's program or runner never started, or None when it ran (and perhaps
    failed): a gate that reported tests started, whatever its exit code."""
    if result.passed or result.timed_out or result.tests:
        return None
    output, command = result.output_tail, result.command
    words = command.split()
    if result.exit_code in (COMMAND_NOT_FOUND, NOT_EXECUTABLE):
        found = (
            NOT_FOUND_RE if result.exit_code == COMMAND_NOT_FOUND else NOT_EXECUTABLE_RE
        ).search(output)
        name = found["name"].strip() if found else (words[0] if words else command)
        if result.exit_code == NOT_EXECUTABLE:
            return _not_executable(result, name, place)
        return _not_found(result, name, place)
    if runner := NO_RUNNER_RE.search(output):
        module = runner["module"] or runner["dotted"]
        if module in words:
            python = runner["python"]
            missing = f"{python} has no module {module}"
            fix = (
                f"install it for that Python (`{python} -m pip install {module.split('.')[0]}`, "
                "or the project's test dependencies), or give the checks the Python that has "
                "it first on their PATH (`--gate-path`, REQDRIVE_GATE_PATH)"
            )
            return Unstartable(result.name, command, missing, fix)
    return _node_runner(result, words)


def _not_found(result: GateResult, name: str, place: GatePlace) -> Unstartable:
    on_gate_path = shutil.which(name, path=place.gate_path)
    if on_gate_path is not None and place.sandboxed:
        missing = f"`{name}` ({on_gate_path}) is not visible in the sandbox"
        return Unstartable(result.name, result.command, missing, _show_fix(name, place))
    elsewhere = shutil.which(name, path=place.worker_path) if "/" not in name else None
    if on_gate_path is None and elsewhere is not None:
        missing = f"`{name}` is not on the checks' PATH ({place.gate_path}), only at {elsewhere}"
        fix = (
            f"put {Path(elsewhere).parent} on the checks' PATH (`--gate-path`, REQDRIVE_GATE_PATH)"
        )
        if place.sandboxed:
            fix += "; the sandbox then shows it by itself"
        return Unstartable(result.name, result.command, missing, fix)
    missing = f"`{name}`: command not found (the checks' PATH is {place.gate_path})"
    if (result.command.split() or [""])[0] in NODE_RUNNERS:  # `npm test` running `vitest`
        return Unstartable(result.name, result.command, missing, NODE_FIX.replace("PACKAGE", name))
    if "node_modules/" in name:  # `node_modules/.bin/mocha` in a worktree without them
        package = name.rsplit("/", 1)[-1]
        missing = f"`{name}` does not exist: the worktree has no node_modules"
        return Unstartable(
            result.name, result.command, missing, NODE_FIX.replace("PACKAGE", package)
        )
    fix = (
        f"install {name}, or change the command in .github/reqdrive.yml; if it is installed "
        "outside that PATH, name its folder with `--gate-path` (REQDRIVE_GATE_PATH)"
    )
    return Unstartable(result.name, result.command, missing, fix)


def _not_executable(result: GateResult, name: str, place: GatePlace) -> Unstartable:
    if not Path(name).is_absolute() and "/" in name:  # the repository's own script
        fix = f"make it executable in the repository (`git update-index --chmod=+x {name}`)"
        return Unstartable(result.name, result.command, f"`{name}` is not executable", fix)
    missing = f"`{name}` cannot be executed (permission denied)"
    if place.sandboxed:
        return Unstartable(result.name, result.command, missing, _show_fix(name, place))
    return Unstartable(result.name, result.command, missing, f"make {name} executable")


def _show_fix(name: str, place: GatePlace) -> str:
    env = {"PATH": place.gate_path}
    folders = real_prefixes(name, env, place.keep_out) or tool_paths(name, place.gate_path)
    shown = ":".join(str(f) for f in dict.fromkeys(folders)) or f"the folder {name} lives in"
    return f"add {shown} to REQDRIVE_SANDBOX_READONLY (read-only toolchains the sandbox shows)"


def _node_runner(result: GateResult, words: list[str]) -> Unstartable | None:
    """Node's runner missing: `Cannot find module` naming a package of the command, or npx
    with nothing to run."""
    fix = NODE_FIX
    if (module := NODE_MODULE_RE.search(result.output_tail)) is not None:
        package = module["module"].rsplit("node_modules/", 1)[-1].split("/")[0]
        if any(w == package or f"node_modules/{package}/" in w for w in words):
            missing = f"the Node module {package} is not installed"
            return Unstartable(
                result.name, result.command, missing, fix.replace("PACKAGE", package)
            )
    # npx in the command, or in the script `npm test` runs (npm passes npm_config_yes on).
    program = next((w for w in words if "=" not in w), "")  # after `VAR=value` words
    from_npm = "npx" in words or program in NODE_RUNNERS
    if (download := NPX_DOWNLOAD_RE.search(result.output_tail)) and from_npm:
        wanted = unquote(download["wanted"] or download["fetched"])
        package = re.sub(r"(?<=.)@[^@/]*$", "", wanted)  # vitest@4.1.12 -> vitest
        missing = f"npx found no {package} in the worktree's node_modules and would download it"
        return Unstartable(result.name, result.command, missing, fix.replace("PACKAGE", package))
    if NPX_RE.search(result.output_tail) and "npx" in words:
        after = words[words.index("npx") + 1 :]
        package = next((w for w in after if not w.startswith("-")), "the runner")
        missing = f"npx found no {package} to run"
        return Unstartable(result.name, result.command, missing, fix.replace("PACKAGE", package))
    return None
