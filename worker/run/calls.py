"""Where a run's agent calls and gate runs happen: confined, with HOMEs of their own."""

from __future__ import annotations

import shutil
from pathlib import Path

from worker.agents.base import AgentCall, AgentOutcome
from worker.confine.sandbox import Sandbox
from worker.model.repo_config import GatesMode
from worker.run.context import RunContext
from worker.verdict.gates import GateResult, run_gates


def call_agent(ctx: RunContext, label: str | int, prompt: str) -> AgentOutcome:
    """One agent call on the worktree with this prompt; its cost is the run's."""
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
    outcome = ctx.runner.run(call, cancel=ctx.cancel)
    ctx.git.secure()  # before any git of ours reads what it may have planted
    folder.sweep()
    ctx.cp.cost_usd += outcome.cost_usd or 0.0
    return outcome


def run_gates_on(ctx: RunContext, label: str, *, fail_fast: bool) -> list[GateResult]:
    """The gates on the worktree as it is; what they wrote is dropped after."""
    if not ctx.gates:
        return []
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
    )
    ctx.git.secure()  # the gates ran the agent's code
    ctx.git.drop_leftovers()
    return results


def _agent_sandbox(ctx: RunContext) -> Sandbox | None:
    """The sandbox for the next agent call: the worktree, the run's HOME, the hand-over
    folder (emptied) and a git folder of its own; None when unconfined."""
    handoff = ctx.places.handoff
    handoff.mkdir(parents=True, exist_ok=True)
    for entry in handoff.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    if ctx.spec.sandbox is None:
        return None
    view = ctx.git.agent_view(ctx.places.git_view)
    return ctx.spec.sandbox.bind(
        writable=[ctx.places.home, handoff, view.git_dir],
        readonly=[view.objects],
        shadows=[(view.git_file, ctx.git.path / ".git")],
    )


def _gate_sandbox(ctx: RunContext) -> Sandbox | None:
    """The sandbox for a gate run: the worktree, the gates' own HOME (emptied) and a git
    folder of its own; not the agent's HOME nor the hand-over folder."""
    _fresh_gate_home(ctx)
    if ctx.spec.sandbox is None:
        return None
    view = ctx.git.agent_view(ctx.places.git_view)
    return ctx.spec.sandbox.bind(
        writable=[ctx.places.gate_home, view.git_dir],
        readonly=[view.objects],
        shadows=[(view.git_file, ctx.git.path / ".git")],
    )


def _fresh_gate_home(ctx: RunContext) -> None:
    """An empty HOME (and TMPDIR) for every gate run. Tools read their user configuration
    there (Python's user site-packages, whose `.pth` lines run at start; `~/.npmrc`'s
    script-shell; `~/.gitconfig`): left by the agent or by the code an earlier gate ran,
    it would change the verdict without showing in the story's diff."""
    gate_home = ctx.places.gate_home
    if gate_home.is_symlink():
        gate_home.unlink()
    shutil.rmtree(gate_home, ignore_errors=True)  # never follows links inside
    Path(ctx.gate_env["TMPDIR"]).mkdir(parents=True, exist_ok=True)
