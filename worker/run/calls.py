"""Where a run's agent calls and gate runs happen: confined, with HOMEs of their own."""

from __future__ import annotations

import time
from dataclasses import replace

from worker.agents.base import AgentCall, AgentOutcome
from worker.confine.disk import empty_folders, over_quota
from worker.confine.egress_rules import REGISTRY_ENDPOINTS
from worker.confine.safe_paths import empty_folder
from worker.confine.sandbox import Sandbox, SandboxNetwork
from worker.model.gates import GateResult
from worker.model.repo_config import GatesMode
from worker.run.context import RunContext
from worker.verdict.gates import run_gates


def call_agent(
    ctx: RunContext, label: str | int, prompt: str, *, start: str | None = None
) -> AgentOutcome:
    """One agent call on the worktree with this prompt, from `start` (the checkpoint's head
    unless given: an implement call starts on its story's frozen tests); its cost is the
    run's."""
    folder = ctx.folder
    prompt_path = folder.write_text(folder.prompt_path(label).name, prompt)
    sandbox = _agent_sandbox(ctx)
    call = AgentCall(
        prompt_file=prompt_path,
        cwd=ctx.git.path,
        run_dir=ctx.places.handoff,
        home_dir=ctx.places.home,
        log_path=folder.log_path(label),
        timeout_s=ctx.agent.timeout_s,
        model=ctx.agent.model,
        sandbox=sandbox and sandbox.bind(readonly=[prompt_path]),
    )
    ctx.reporter.agent_started(str(label))
    outcome = ctx.runner.run(call, cancel=ctx.cancel)
    ctx.reporter.agent_finished(str(label), outcome.duration_s, _ended(ctx, outcome))
    sweep_leftovers(ctx)
    ctx.git.secure()  # before any git of ours reads what it may have planted
    places = ctx.places
    if over := over_quota(
        (ctx.git.path, places.home, places.handoff, places.git_view), ctx.spec.limits
    ):
        # Its files go and the attempt fails: the disk is the host's, not the agent's.
        ctx.git.restore(start or ctx.cp.head_sha, ignored_too=True)
        empty_folders((places.home, places.handoff, places.git_view))
        outcome = replace(outcome, error=over)
    folder.sweep()
    ctx.cp.cost_usd += outcome.cost_usd or 0.0
    return outcome


def run_gates_on(ctx: RunContext, label: str, *, fail_fast: bool) -> list[GateResult]:
    """The gates on the worktree as it is; what they wrote is dropped after."""
    if not ctx.gates:
        return []
    ctx.reporter.gates_started(label, ctx.gates)
    started = time.monotonic()
    results = run_gates(
        ctx.gates,
        cwd=ctx.git.path,
        env=ctx.gate_env,
        output_dir=ctx.folder.path,
        label=label,
        redactor=ctx.redactor,
        parallel=ctx.config.gates_mode is GatesMode.PARALLEL,
        fail_fast=fail_fast,
        cancel=ctx.cancel,
        sandbox=_gate_sandbox(ctx),
        homes=ctx.places.gate_home,
        limits=ctx.spec.limits,
    )
    ctx.reporter.gates_finished(label, results, time.monotonic() - started)
    sweep_leftovers(ctx)
    ctx.git.secure()  # the gates ran the agent's code
    ctx.git.drop_leftovers()
    return results


def _ended(ctx: RunContext, outcome: AgentOutcome) -> str:
    """ "exit 0", "timed out", "exit 1: permission denied: Write": how a call ended, for a
    person watching the run."""
    if outcome.timed_out:
        return "timed out"
    said = f"exit {outcome.exit_code}" if outcome.exit_code is not None else "stopped"
    return said + (f": {ctx.redactor.redact(outcome.error)}" if outcome.error else "")


def _agent_sandbox(ctx: RunContext) -> Sandbox | None:
    """The sandbox for the next agent call: the worktree, the run's HOME, the hand-over
    folder (emptied) and a git folder of its own; None when unconfined."""
    handoff = ctx.places.handoff
    empty_folder(handoff)
    if ctx.spec.sandbox is None:
        return None
    view = ctx.git.agent_view(ctx.places.git_view)
    return ctx.spec.sandbox.bind(
        writable=[ctx.places.home, handoff, view.git_dir],
        readonly=[*ctx.toolchains.folders, view.objects],
        shadows=[(view.git_file, ctx.git.path / ".git")],
    )


def sweep_leftovers(ctx: RunContext) -> None:
    """After the agent or the gates ran: no file they left keeps a setuid/setgid bit, no
    FIFO, socket or device stays (named in the progress); the run goes on."""
    note = ctx.places.scratch.sweep(ctx.git.path).note()
    if note:
        ctx.folder.append_progress(note)


def _gate_sandbox(ctx: RunContext) -> Sandbox | None:
    """The sandbox for a gate run: the worktree and a git folder of its own (run_gates adds
    each gate's own HOME); not the agent's HOME nor the hand-over folder."""
    if ctx.spec.sandbox is None:
        return None
    view = ctx.git.agent_view(ctx.places.git_view)
    return ctx.spec.sandbox.bind(
        writable=[view.git_dir],
        readonly=[*ctx.toolchains.folders, view.objects],
        shadows=[(view.git_file, ctx.git.path / ".git")],
    )


def setup_sandbox(ctx: RunContext) -> Sandbox | None:
    """The checks' sandbox with the package registries reachable, whatever the checks may
    reach: the repository's `setup` downloads its dependencies, and only those."""
    sandbox = _gate_sandbox(ctx)
    if sandbox is None:
        return None
    return replace(sandbox, network=SandboxNetwork.REGISTRIES, api_hosts=REGISTRY_ENDPOINTS)
