"""Test, lint and custom gates, run by the worker, never trusted to the agent."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from worker.confine.bytecode_seed import BytecodeSeed
from worker.confine.gate_homes import own_home, results_folder
from worker.confine.limits import DEFAULT_LIMITS, ResourceLimits
from worker.confine.processes import ProcessOutcome, run_process
from worker.confine.redact import Redactor
from worker.confine.safe_paths import LinkError, empty_folder, unlink_under
from worker.confine.sandbox import Sandbox
from worker.confine.worktree_bytecode import WorktreeBytecode
from worker.model.gates import UNSAFE_NAME_RE, GateResult, GateSpec
from worker.verdict.collect import Places, collect, runs_tests
from worker.verdict.runners import (
    JUNIT_FILE,
    PLUGIN_UNLOADED,
    ReporterSetup,
    hint,
    reporter_setup,
    runner_of,
)

JUNIT_VAR = "REQDRIVE_JUNIT_XML"  # where a gate with `junit: true` writes its report
# Where each gate run's Python reads and writes its bytecode: a fresh folder of the worker's,
# never the worktree's __pycache__/ (ignored, so kept between gate runs), where the agent or a
# gate that ran its code may have left bytecode that does not match the source (an
# unchecked-hash .pyc, or one stamped with the source's mtime and size), which Python would
# run in place of the source on a later gate run: on the story's parent, say.
PYCACHE_VAR = "PYTHONPYCACHEPREFIX"
PYCACHE_DIR = "pycache"


def gate_specs(
    test_command: str | None, lint_command: str | None, gates: Sequence[GateSpec]
) -> list[GateSpec]:
    """The gates of a repository: "tests", "lint", then its custom ones, in that order."""
    specs = []
    if test_command:
        specs.append(GateSpec(name="tests", command=test_command))
    if lint_command:
        specs.append(GateSpec(name="lint", command=lint_command))
    return [*specs, *gates]


def run_gates(
    specs: Sequence[GateSpec],
    *,
    cwd: Path,
    env: Mapping[str, str],
    output_dir: Path,
    label: str,
    redactor: Redactor,
    parallel: bool = False,
    fail_fast: bool = True,
    cancel: threading.Event | None = None,
    sandbox: Sandbox | None = None,
    homes: Path | None = None,
    limits: ResourceLimits = DEFAULT_LIMITS,
    only: Collection[str] | None = None,
    narrow: bool = False,
    seed: BytecodeSeed | None = None,
    own_bytecode: WorktreeBytecode | None = None,
    every_gate: bool = False,
) -> list[GateResult]:
    """Run the gates and save <label>.gates.json and a log per gate in output_dir.

    Sequential and stopping at the first failure by default (gates not run are absent);
    parallel runs every gate at once; fail_fast=False runs every gate one after another.
    With `homes`, each gate gets a fresh HOME of its own there (gate_homes.own_home).
    With `only`, just the gates that run tests, each limited to those ids where its runner
    can select them (run_gate); with `narrow` too, pytest collects only the files they are in;
    with `every_gate` too, the gates that run no tests run as well, whole (a story's check).
    With `seed`, each run's fresh pycache folder starts as a copy of the worker's own bytecode
    of library modules (bytecode_seed.py); with `own_bytecode`, of the worktree's modules as
    well, hash-checked (worktree_bytecode.py).
    """
    output_dir.mkdir(parents=True, exist_ok=True)
    tested = {spec.name for spec in specs if runs_tests(spec, runner_of(spec))}
    if only is not None and not every_gate:
        specs = [spec for spec in specs if spec.name in tested]

    def run_one(spec: GateSpec) -> GateResult:
        with own_home(homes, env, sandbox) as (gate_env, gate_sandbox):
            return run_gate(
                spec,
                cwd=cwd,
                env=gate_env,
                output_dir=output_dir,
                label=label,
                redactor=redactor,
                cancel=cancel,
                sandbox=gate_sandbox,
                limits=limits,
                only=only if spec.name in tested else None,
                narrow=narrow,
                seed=seed,
                own_bytecode=own_bytecode,
            )

    results: list[GateResult] = []
    if parallel and specs:
        with ThreadPoolExecutor(max_workers=len(specs), thread_name_prefix="gate") as pool:
            results = list(pool.map(run_one, specs))
    else:
        for spec in specs:
            if cancel is not None and cancel.is_set():
                break
            results.append(run_one(spec))
            if fail_fast and not results[-1].passed:
                break
    summary = output_dir / f"{label}.gates.json"
    summary.write_text(redactor.redact(json.dumps([r.to_json() for r in results], indent=2)) + "\n")
    return results


def run_gate(
    spec: GateSpec,
    *,
    cwd: Path,
    env: Mapping[str, str],
    output_dir: Path,
    label: str,
    redactor: Redactor,
    cancel: threading.Event | None = None,
    sandbox: Sandbox | None = None,
    limits: ResourceLimits = DEFAULT_LIMITS,
    only: Collection[str] | None = None,
    narrow: bool = False,
    seed: BytecodeSeed | None = None,
    own_bytecode: WorktreeBytecode | None = None,
) -> GateResult:
    """Run one gate with bash in its own process group (in the sandbox, if given: it runs
    the agent's code), with the worker's own reporter for its runner added (runners.py);
    read what that reporter wrote, outside the worktree, and cross-check it (collect.py).
    With `only`, a runner that can select tests runs just those ids; with `narrow` too, pytest
    collects only the files they are in (reporter_setup)."""
    stem = f"{label}.{UNSAFE_NAME_RE.sub('_', spec.name)}"
    log_path = output_dir / f"{stem}.log"
    runner = runner_of(spec)
    if isinstance(spec.junit, str):
        # A report the agent committed must never stand in for this run's results.
        _drop_stale(cwd, spec.junit)
    with results_folder() as folder:
        setup = reporter_setup(spec, runner, folder, only, env, narrow=narrow)
        _fresh_pycache(folder, seed, own_bytecode, cwd)
        gate_env = {**env, PYCACHE_VAR: str(folder / PYCACHE_DIR)}
        if spec.junit is True:
            gate_env[JUNIT_VAR] = str(folder / JUNIT_FILE)

        def launch(setup: ReporterSetup) -> ProcessOutcome:
            log_path.unlink(missing_ok=True)  # run_process appends; a re-run replaces the log
            return run_process(
                ["bash", "-c", setup.command],
                cwd=cwd,
                env={**gate_env, **setup.env},
                timeout_s=spec.timeout_s,
                log_path=log_path,
                redactor=redactor,
                cancel=cancel,
                sandbox=sandbox and sandbox.bind(writable=[folder], readonly=setup.readonly),
            )

        process = launch(setup)
        if setup.plugin and PLUGIN_UNLOADED in process.output_tail:
            # The command set PYTHONPATH where the worker could not see it (a script): run
            # again with pytest's JUnit report alone; the results say the plugin was missing.
            # The tested code can print the marker too: nothing the first run wrote may be
            # read as the second's.
            empty_folder(folder)
            _fresh_pycache(folder, seed, own_bytecode, cwd)
            process = launch(setup.without_plugin(spec))
        if seed is not None:  # the worktree's, the gate's HOME and its own folder kept out
            seed.learn(
                folder / PYCACHE_DIR, [cwd, folder, *(Path(h) for h in [env.get("HOME")] if h)]
            )
        if own_bytecode is not None:
            own_bytecode.learn(folder / PYCACHE_DIR, cwd)
        places = Places(cwd=cwd, folder=folder, log=log_path, output_dir=output_dir, stem=stem)
        found = collect(spec, runner, places, process.exit_code, redactor, limits, only)
    output = process.output_tail
    # Asked for, its absence is worth saying; and a report refused as too large always is.
    if found.problem and (spec.junit is not False or "too large" in found.problem):
        output += f"\n[reqdrive] no per-test results: {found.problem}\n"
    tested = found.tests is not None
    return GateResult(
        name=spec.name,
        command=redactor.redact(spec.command),  # shown in the PR; config may inline a secret
        passed=process.exit_code == 0 and not process.timed_out,
        exit_code=process.exit_code,
        timed_out=process.timed_out,
        duration_s=process.duration_s,
        output_tail=output,
        tests=found.tests,
        failures=found.failures,
        failure_sites=found.sites,
        disagreements=[redactor.redact(d) for d in found.disagreements],
        # The hint quotes the command, which may inline a secret.
        no_results=(
            ""
            if tested or not runs_tests(spec, runner)
            else redactor.redact(hint(runner, spec, cwd))
        ),
        selected=sorted(only) if only is not None and tested and found.selecting else None,
    )


def _fresh_pycache(
    folder: Path, seed: BytecodeSeed | None, own_bytecode: WorktreeBytecode | None, cwd: Path
) -> None:
    """The run's own pycache folder: empty, or a copy of the seeds."""
    if seed is None:
        (folder / PYCACHE_DIR).mkdir()
    else:
        seed.lay_into(folder / PYCACHE_DIR)
    if own_bytecode is not None:
        own_bytecode.lay_into(folder / PYCACHE_DIR, cwd)


def _drop_stale(root: Path, rel: str) -> None:
    """A report left from before (an earlier run's, one the agent committed) must never stand
    in for this run's results; a link on the way leads out of reach, and is left alone."""
    with contextlib.suppress(LinkError, FileNotFoundError):
        unlink_under(root, rel)
