"""Which test runner a gate starts, and how the worker adds its own reporter to it."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from worker.model.gates import GateSpec, Runner

# The folder holding reqdrive's pytest plugin: bound read-only into the gate's sandbox and
# put on its PYTHONPATH, so `-p reqdrive_results` finds it and nothing in the worktree can.
PLUGIN_DIR = Path(__file__).resolve().parent / "pytest_plugin"
PLUGIN_MODULE = "reqdrive_results"
RESULTS_VAR = "REQDRIVE_RESULTS"  # the plugin's results file (reqdrive_results.RESULTS_VAR)
ONLY_VAR = "REQDRIVE_ONLY"  # the file of test ids to keep (reqdrive_results.ONLY_VAR)
# Set: pytest collects only the files those ids are in (reqdrive_results.NARROW_VAR).
NARROW_VAR = "REQDRIVE_NARROW"
PLUGIN_FILE = "pytest-results.jsonl"
JUNIT_FILE = "report.junit.xml"
JSON_FILE = "report.json"
# pytest's default report format (xunit2) leaves out each test's file and line; xunit1 adds
# them, so a failing test can be shown on its line of the pull request.
PYTEST_JUNIT_FAMILY = "-o junit_family=xunit1"

# The runner a command starts, from its words. A word is matched whole, so `pytest-cov` or a
# folder named `jest-tests` is not a runner; the first match wins.
RUNNER_RE = (
    (Runner.PYTEST, re.compile(r"(?:^|[\s/;&|(])(?:py\.test|pytest)(?=$|[\s;&|)])")),
    (Runner.GO, re.compile(r"(?:^|[\s;&|(])go\s+test(?=$|[\s;&|)])")),
    (Runner.VITEST, re.compile(r"(?:^|[\s/;&|(])vitest(?=$|[\s;&|)])")),
    (Runner.JEST, re.compile(r"(?:^|[\s/;&|(])jest(?=$|[\s;&|)])")),
    (Runner.NODE, re.compile(r"(?:^|[\s/;&|(])node\s+(?:[^;&|]*\s)?--test(?=$|[\s;&|)=])")),
    (Runner.NEXTEST, re.compile(r"(?:^|[\s;&|(])cargo\s+nextest\s+run(?=$|[\s;&|)])")),
    (Runner.CARGO, re.compile(r"(?:^|[\s;&|(])cargo\s+test(?=$|[\s;&|)])")),
)
# Where the worker's flags go in the command: right after the runner's word (and `run` for
# vitest), so whatever the command does after it is left as it is.
INSERT_AFTER_RE = {
    Runner.VITEST: re.compile(r"(?:^|(?<=[\s/;&|(]))vitest(?:\s+run)?(?=$|[\s;&|)])"),
    Runner.JEST: re.compile(r"(?:^|(?<=[\s/;&|(]))jest(?=$|[\s;&|)])"),
    Runner.NODE: re.compile(r"(?:^|(?<=[\s/;&|(]))node\s+(?:[^;&|]*\s)?--test(?=$|[\s;&|)])"),
}
# The configuration that gives per-test results, per runner, for a gate that gave none.
HINTS = {
    Runner.PYTEST: "testCommand: python -m pytest",
    Runner.GO: "testCommand: go test ./...",
    Runner.VITEST: "testCommand: npx vitest run",
    Runner.JEST: "testCommand: npx jest --ci",
    Runner.NODE: "testCommand: node --test",
    Runner.CARGO: (
        "gates: [{name: tests, command: cargo nextest run --profile ci, "
        "junit: target/nextest/ci/junit.xml}] (with [profile.ci.junit] in .config/nextest.toml)"
    ),
    Runner.NEXTEST: (
        "gates: [{name: tests, command: cargo nextest run --profile ci, "
        "junit: target/nextest/ci/junit.xml}] (with [profile.ci.junit] in .config/nextest.toml)"
    ),
}
ADDED = {
    Runner.PYTEST: "reqdrive loads its own pytest plugin",
    Runner.GO: "reqdrive adds -json",
    Runner.VITEST: "reqdrive adds --reporter=json --outputFile",
    Runner.JEST: "reqdrive adds --json --outputFile",
    Runner.NODE: "reqdrive adds --test-reporter=junit",
}
# A PYTHONPATH the command sets itself (`PYTHONPATH=src pytest`, as `reqdrive init` writes
# for a src/ layout) replaces the gate's: the plugin's folder is appended to it.
PYTHONPATH_RE = re.compile(r"(?<![\w$])PYTHONPATH=(?P<value>\"[^\"]*\"|'[^']*'|[^\s;&|)]*)")
# What pytest says when the plugin's folder is not on its path after all (a script that sets
# PYTHONPATH): the gate then runs again without the plugin.
PLUGIN_UNLOADED = f'Error importing plugin "{PLUGIN_MODULE}"'
JS_REGEX_RE = re.compile(r"[.*+?^${}()|\[\]\\/]")  # characters a JS regex gives a meaning
PACKAGE_JSON_CHARS = 1_000_000  # of package.json, read only to name the runner in a hint
SCRIPT_RUNNERS = (Runner.VITEST, Runner.JEST, Runner.NODE)


def detect_runner(command: str) -> Runner | None:
    """The runner a gate's command starts, from its words; None when it names none."""
    for runner, pattern in RUNNER_RE:
        if pattern.search(command):
            return runner
    return None


def runner_of(spec: GateSpec) -> Runner | None:
    """The runner the gate names (`runner:`), else the one its command starts."""
    return spec.runner or detect_runner(spec.command)


@dataclass(frozen=True)
class ReporterSetup:
    """How one gate run is set up to report per test: its command, the variables added, the
    read-only folders it needs."""

    command: str
    env: dict[str, str] = field(default_factory=dict)
    readonly: tuple[Path, ...] = ()

    @property
    def plugin(self) -> bool:
        """Whether pytest is asked to load reqdrive's plugin."""
        return PLUGIN_MODULE in self.env.get("PYTEST_ADDOPTS", "")

    def without_plugin(self, spec: GateSpec) -> ReporterSetup:
        """The same run with pytest's own JUnit report alone, as the command was written."""
        env = {k: v for k, v in self.env.items() if k not in ("PYTHONPATH", RESULTS_VAR)}
        env["PYTEST_ADDOPTS"] = env["PYTEST_ADDOPTS"].replace(f"-p {PLUGIN_MODULE} ", "")
        return ReporterSetup(spec.command, env)


def reporter_setup(
    spec: GateSpec,
    runner: Runner | None,
    folder: Path,
    only: Collection[str] | None,
    env: Mapping[str, str],
    *,
    narrow: bool = False,
) -> ReporterSetup:
    """The gate's command and environment with the worker's reporter added; its reports go to
    `folder`, the worker's own, outside the worktree. With `narrow`, pytest does not collect
    the test files that hold none of `only` (the others are deselected either way)."""
    command = spec.command
    # Without a runner named, pytest is still asked: a script or `make test` may start it.
    if runner in (Runner.PYTEST, None):
        added = {
            "PYTHONPATH": ":".join(p for p in (str(PLUGIN_DIR), env.get("PYTHONPATH")) if p),
            RESULTS_VAR: str(folder / PLUGIN_FILE),
            # With a report of its own (`junit: path`), pytest writes that one, not ours.
            "PYTEST_ADDOPTS": f"-p {PLUGIN_MODULE}"
            + ("" if isinstance(spec.junit, str) else f" --junitxml={folder / JUNIT_FILE}")
            + f" {PYTEST_JUNIT_FAMILY}",
        }
        if only is not None:
            (folder / "only.txt").write_text("".join(f"{t}\n" for t in sorted(only)))
            added[ONLY_VAR] = str(folder / "only.txt")
            if narrow:
                added[NARROW_VAR] = "1"
        command = PYTHONPATH_RE.sub(lambda m: f"PYTHONPATH={m['value']}:{PLUGIN_DIR}", command)
        return ReporterSetup(command, added, (PLUGIN_DIR,))
    if runner is Runner.GO and spec.junit is False:
        goflags = " ".join(f for f in (env.get("GOFLAGS", ""), "-json", _go_run(only)) if f)
        return ReporterSetup(command, {"GOFLAGS": goflags})
    reporters = {
        Runner.VITEST: f"--reporter=default --reporter=json --outputFile.json={folder / JSON_FILE}",
        Runner.JEST: f"--json --outputFile={folder / JSON_FILE}",
        Runner.NODE: (
            "--test-reporter=spec --test-reporter-destination=stdout "
            f"--test-reporter=junit --test-reporter-destination={folder / JUNIT_FILE}"
        ),
    }
    # A gate that names its own report (`junit:`) keeps its command as it is.
    flags = reporters.get(runner) if runner is not None and spec.junit is False else None
    if flags is not None and runner in (Runner.JEST, Runner.VITEST) and only is not None:
        flags += _js_selection(runner, only)
    if flags is not None and runner in INSERT_AFTER_RE:
        place = INSERT_AFTER_RE[runner].search(command)
        if place is not None:
            command = f"{command[: place.end()]} {flags}{command[place.end() :]}"
    return ReporterSetup(command)


def _js_selection(runner: Runner, only: Collection[str]) -> str:
    """The test files and a name pattern for the ids asked for ("file::describe > name"):
    both runners match `-t` against the describe titles and the name joined by spaces
    (vitest 1 puts a space first, for the file's nameless suite) and report the tests it
    leaves out as pending or skipped (collect.py keeps only the ids asked for). jest takes
    files as patterns, vitest as parts of a path."""
    files = sorted({t.partition("::")[0] for t in only})
    names = sorted({t.partition("::")[2].replace(" > ", " ") for t in only})
    escape = (lambda f: JS_REGEX_RE.sub(r"\\\g<0>", f)) if runner is Runner.JEST else str
    selection = " ".join(shlex.quote(escape(f)) for f in files)
    if all(names):  # an id without a name is a whole file (one that failed to load)
        alternatives = "|".join(JS_REGEX_RE.sub(r"\\\g<0>", n) for n in names)
        selection += f" -t {shlex.quote(f'^ ?({alternatives})$')}"
    return f" {selection}" if files else ""


def _go_run(only: Collection[str] | None) -> str:
    """`-run` for the ids asked for ("package::TestName/sub"): their top-level tests, in
    every package the command tests (a name another package shares runs there too)."""
    if only is None:
        return ""
    names = sorted({t.partition("::")[2].partition("/")[0] for t in only} - {""})
    if not names:
        return "-run=^$"
    return "-run=^(" + "|".join(re.escape(n) for n in names) + ")$"


def hint(runner: Runner | None, spec: GateSpec, worktree: Path) -> str:
    """Why the gate gave no per-test results and the configuration line that would."""
    said = f"gate {spec.name} (`{spec.command}`) gives no per-test results"
    runner = runner or _script_runner(spec.command, worktree)
    if runner is None:
        return (
            f"{said}: reqdrive cannot tell which tests ran. Name the runner or a JUnit report in "
            f"its gate: gates: [{{name: {spec.name}, command: {shlex.quote(spec.command)}, "
            "runner: pytest|go|vitest|jest|node}] or junit: <report path>"
        )
    added = f" ({ADDED[runner]})" if runner in ADDED else ""
    return f"{said}; for {runner}, set `{HINTS[runner]}` in .github/reqdrive.yml{added}"


def _script_runner(command: str, worktree: Path) -> Runner | None:
    """The JS runner package.json's `test` script starts, for `npm test` and the like; only
    its name is used (in a hint), never the script's text."""
    if not re.search(r"\b(?:npm|yarn|pnpm)\s+(?:run\s+)?test\b", command):
        return None
    try:
        path = worktree / "package.json"
        if path.is_symlink() or not path.is_file():
            return None
        with path.open(encoding="utf-8", errors="replace") as stream:
            scripts = json.loads(stream.read(PACKAGE_JSON_CHARS)).get("scripts", {})
        script = scripts.get("test", "") if isinstance(scripts, dict) else ""
    except (OSError, ValueError, AttributeError):
        return None
    found = detect_runner(script) if isinstance(script, str) else None
    return found if found in SCRIPT_RUNNERS else None
