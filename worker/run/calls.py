"""Where a run's agent calls and gate runs happen: confined, with HOMEs of their own."""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import replace
from pathlib import Path

from worker.agents.base import AgentCall, AgentOutcome, AgentRunner
from worker.agents.claude import ClaudeRunner
from worker.agents.pricing import CallCost, call_cost, with_cost
from worker.confine.bytecode_seed import BytecodeSeed
from worker.confine.disk import empty_folders, over_quota
from worker.confine.egress_rules import REGISTRY_ENDPOINTS
from worker.confine.safe_paths import empty_folder, remove_under
from worker.confine.sandbox import Sandbox, SandboxNetwork
from worker.confine.worktree_bytecode import WorktreeBytecode
from worker.exceptions import AgentError, BudgetReached
from worker.model.gates import GateResult
from worker.model.repo_config import GatesMode
from worker.model.state import StopReason
from worker.run.context import RunContext
from worker.run.setup_made import real_path, setup_made
from worker.run.setup_made import state as setup_state
from worker.run.turn_budget import TurnBudget
from worker.verdict.frozen_side import changed_during_check, file_states, frozen_paths
from worker.verdict.gates import run_gates

# npm's settings for every check (not the setup, which installs): npx never downloads a
# package the worktree does not have, so a missing node_modules stops the run at the baseline
# (verdict/unstartable.py) instead of the checks running the newest major of the runner; and
# no update check reaching the registry from every npm command. `npx --yes` still downloads.
NPM_CHECK_SETTINGS = {"npm_config_yes": "false", "npm_config_update_notifier": "false"}
# The worker's own bytecode of library modules, copied into each gate run's pycache folder
# (confine/bytecode_seed.py); under the work dir, which no agent or gate is given.
BYTECODE_SEED = "bytecode-seed"
# The folders a setup fills when `setupCache` names none (worker/run/setup.py caches them).


def budget_reached(ctx: RunContext) -> BudgetReached | None:
    """Why no agent call may start now: the run's budgetUsd spent, or the budget it shares
    (the installation's month); None while both have room."""
    budget, spent = ctx.config.budget_usd, ctx.cp.cost_usd - ctx.cp.budget_from_usd
    if budget is not None and spent >= budget:
        return BudgetReached(
            f"budget reached: this run's agent calls cost ${spent:.2f} of its budgetUsd "
            f"${budget:.2f}"
        )
    shared = ctx.spec.shared_budget
    why = shared.reached() if shared is not None else None
    return BudgetReached(f"budget reached: {why}", shared=True) if why else None


def budget_stop(reached: BudgetReached) -> StopReason:
    return StopReason.MONTHLY_BUDGET_SPENT if reached.shared else StopReason.BUDGET_SPENT


def call_agent(
    ctx: RunContext, label: str | int, prompt: str, *, start: str | None = None
) -> AgentOutcome:
    """One agent call on the worktree with this prompt, from `start` (the checkpoint's head
    unless given: an implement call starts on its story's frozen tests), unless a budget is
    spent (raises BudgetReached, before anything starts); its cost is the run's and the
    shared budget's."""
    if (reached := budget_reached(ctx)) is not None:
        raise reached
    folder = ctx.folder
    prompt_path = folder.write_text(folder.prompt_path(label).name, prompt)
    sandbox = _agent_sandbox(ctx)
    environment = setup_state(ctx, deep=sandbox is None)
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
    outcome, watch = _watched(ctx, ctx.runner, call)
    ctx.reporter.agent_finished(str(label), outcome.duration_s, _ended(ctx, outcome))
    sweep_leftovers(ctx)
    ctx.git.secure()  # before any git of ours reads what it may have planted
    _check_setup_state(ctx, environment, deep=sandbox is None)
    places = ctx.places
    # The setup's installed environment is the host's to pay for, not the call's.
    setup_made = [ctx.git.path / name for name in ctx.git.kept]
    if over := over_quota(
        (ctx.git.path, places.home, places.handoff, places.git_view),
        ctx.spec.limits,
        skip=setup_made,
    ):
        # Its files go and the attempt fails: the disk is the host's, not the agent's.
        ctx.git.restore(start or ctx.cp.head_sha, ignored_too=True)
        empty_folders((places.home, places.handoff, places.git_view))
        outcome = replace(outcome, error=over)
    folder.sweep()
    cost, stopped = _charge(ctx, call, label, outcome, watch)
    if stopped:
        # What it changed before it was stopped is not judged: the worktree goes back.
        ctx.git.restore(ctx.cp.head_sha, ignored_too=True)
        raise budget_reached(ctx) or BudgetReached("budget reached")
    return with_cost(outcome, cost)


def call_reviewer(
    ctx: RunContext, runner: AgentRunner, call: AgentCall, folders: Sequence[Path]
) -> AgentOutcome:
    """One blind reviewer's call under the checks of call_agent: none starts on a spent
    budget, a streaming one is stopped between turns at it (BudgetReached), the reviewer's
    `folders` are held to the disk quota after it (emptied when over), and its cost is the
    run's and the shared budget's."""
    if (reached := budget_reached(ctx)) is not None:
        raise reached
    outcome, watch = _watched(ctx, runner, call)
    if over := over_quota(folders, ctx.spec.limits):
        empty_folders(folders)
        outcome = replace(outcome, error=over)
    cost, stopped = _charge(ctx, call, call.log_path.stem, outcome, watch)
    if stopped:
        raise budget_reached(ctx) or BudgetReached("budget reached")
    return with_cost(outcome, cost)


def _watched(
    ctx: RunContext, runner: AgentRunner, call: AgentCall
) -> tuple[AgentOutcome, TurnBudget | None]:
    """The call run, watched between its turns when a budget caps the run."""
    watch = _turn_budget(ctx, runner, call)
    if watch is None:
        return runner.run(call, cancel=ctx.cancel), None
    watch.start()
    try:
        return runner.run(call, cancel=watch.stop), watch
    finally:
        watch.finish()


def _charge(
    ctx: RunContext,
    call: AgentCall,
    label: str | int,
    outcome: AgentOutcome,
    watch: TurnBudget | None,
) -> tuple[CallCost, bool]:
    """What the call cost, counted in the run and the shared budget; and whether the watch
    stopped it (a call that ended on its own as the budget was reached keeps its work: the
    next budget check stops the run)."""
    cost = call_cost(outcome, call.model)
    stopped = watch is not None and watch.reached and outcome.exit_code is None
    if stopped and watch is not None and watch.estimate_usd > cost.usd:
        # Stopped mid-call, it printed no result line: what its replies streamed is its cost.
        cost = CallCost(watch.estimate_usd, "stopped between turns: its streamed replies priced")
    if cost.note:
        ctx.folder.append_progress(f"agent call {label}: {cost.note}")
    ctx.cp.cost_usd += cost.usd
    if ctx.spec.shared_budget is not None:
        ctx.spec.shared_budget.charge(cost.usd)
    return cost, stopped


def _turn_budget(ctx: RunContext, runner: AgentRunner, call: AgentCall) -> TurnBudget | None:
    """A watch on the call's streamed turns, when the runner streams them and a budget caps
    the run: its budgetUsd, the installation's monthly budget, or both."""
    if not isinstance(runner, ClaudeRunner) or headroom(ctx) is None:
        return None
    return TurnBudget(
        log_path=call.log_path,
        model=call.model,
        headroom=lambda: headroom(ctx) or 0.0,
        cancel=ctx.cancel,
    )


def headroom(ctx: RunContext) -> float | None:
    """USD the run may still spend: the least its budgetUsd and the shared budget leave (None:
    neither caps it)."""
    left: list[float] = []
    if ctx.config.budget_usd is not None:
        left.append(ctx.config.budget_usd - (ctx.cp.cost_usd - ctx.cp.budget_from_usd))
    shared = ctx.spec.shared_budget.remaining() if ctx.spec.shared_budget is not None else None
    if shared is not None:
        left.append(shared)
    return min(left) if left else None


def run_gates_on(
    ctx: RunContext,
    label: str,
    *,
    fail_fast: bool,
    only: Collection[str] | None = None,
    narrow: bool = False,
    every_gate: bool = False,
) -> list[GateResult]:
    """The gates on the worktree as it is; what they wrote is dropped after.

    Each gate reports per test through a reporter the worker adds (verdict/runners.py),
    cross-checked (GateResult.disagreements). With `only` (test ids, as results name them,
    or a test file's path for all its tests),
    just the gates that run tests run, and a runner that can select tests runs only those:
    pytest (reqdrive's plugin deselects the others), go (`-run` on their top-level names,
    in every package the command tests), jest and vitest (their files and a `-t` name
    pattern); node and others run whole.
    A gate whose runner selected them says so in `selected`; an id in `only` missing from
    its `tests` did not run (no such test, or it was not collected).
    With `narrow` (a fail-to-pass proof on a story's parent), pytest does not even collect
    the test files that hold none of them: the proof pays for its own files, not for the
    whole suite's collection. Re-runs of a test that passed before stay un-narrowed: their
    flakiness is judged against a run that collected what the whole run did.
    With `every_gate` (a story's check on the tests its change reaches), the gates that run
    no tests run too, whole."""
    if not ctx.gates:
        return []
    ctx.git.clean_for_checks()
    frozen = frozen_paths(ctx.git.path, ctx.test_side)
    before = file_states(ctx.git.path, frozen)
    ctx.reporter.gates_started(label, ctx.gates)
    started = time.monotonic()
    results = run_gates(
        ctx.gates,
        cwd=ctx.git.path,
        env={**ctx.gate_env, **NPM_CHECK_SETTINGS},
        output_dir=ctx.folder.path,
        label=label,
        redactor=ctx.redactor,
        parallel=ctx.config.gates_mode is GatesMode.PARALLEL,
        fail_fast=fail_fast,
        cancel=ctx.cancel,
        sandbox=_gate_sandbox(ctx, frozen_setup=True, frozen_tests=frozen),
        homes=ctx.places.gate_home,
        limits=ctx.spec.limits,
        only=only,
        narrow=narrow,
        every_gate=every_gate,
        seed=BytecodeSeed(ctx.spec.bytecode_seed or ctx.spec.work_dir / BYTECODE_SEED),
        own_bytecode=WorktreeBytecode(ctx.places.bytecode),
    )
    if changed := changed_during_check(ctx.git.path, before):
        said = "the check changed the test side while it ran: " + ", ".join(changed[:5])
        results = [
            r.model_copy(update={"disagreements": [*r.disagreements, said]}) for r in results
        ]
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
    # What the setup made read-only over the writable worktree: the agent reads it, but an
    # edited package, a planted .pth or a rewritten generated module would change every
    # later check (setup_made.py).
    worktree = ctx.git.path
    installed = [worktree / name for name in setup_made(ctx) if real_path(worktree, name)]
    return ctx.spec.sandbox.bind(
        writable=[ctx.places.home, handoff, view.git_dir],
        readonly=[*ctx.toolchains.folders, view.objects],
        shadows=[(view.git_file, worktree / ".git"), *((p, p) for p in installed)],
    )


def _check_setup_state(
    ctx: RunContext, before: dict[str, tuple[int, ...] | None], *, deep: bool
) -> None:
    """After an agent call: a setup folder it made or changed is removed, and the run ends
    (AgentError): every later check would run with what it installed, not the setup's."""
    after = setup_state(ctx, deep=deep)
    changed = [name for name, state in after.items() if state != before.get(name)]
    if not changed:
        return
    for name in changed:
        remove_under(ctx.git.path, name)
    why = (
        f"the agent changed the setup's installed environment ({', '.join(changed)}), "
        "which every later check runs with; removed, and the run stops"
    )
    ctx.folder.append_progress(why)
    raise AgentError(why)


def sweep_leftovers(ctx: RunContext) -> None:
    """After the agent or the gates ran: no file they left keeps a setuid/setgid bit, no
    FIFO, socket or device stays (named in the progress); the run goes on."""
    note = ctx.places.scratch.sweep(ctx.git.path).note()
    if note:
        ctx.folder.append_progress(note)


def _gate_sandbox(
    ctx: RunContext, *, frozen_setup: bool = False, frozen_tests: Collection[str] = ()
) -> Sandbox | None:
    """The sandbox for a gate run: the worktree and a git folder of its own (run_gates adds
    each gate's own HOME); not the agent's HOME nor the hand-over folder. With
    `frozen_setup`, the setup's Python environments read-only: the story's code runs in the
    checks, and a .pth or a patched package it left there would run in every later check,
    on the parent commits that prove its tests too. (node_modules stays writable: runners
    keep their caches in it, nyc and vitest among them.) `frozen_tests`: the tracked
    test-side paths, read-only too (frozen_side.frozen_paths)."""
    if ctx.spec.sandbox is None:
        return None
    view = ctx.git.agent_view(ctx.places.git_view)
    worktree = ctx.git.path
    frozen = [
        worktree / name
        for name in (setup_made(ctx) if frozen_setup else [])
        if name != "node_modules" and real_path(worktree, name)
    ]
    return ctx.spec.sandbox.bind(
        writable=[view.git_dir],
        readonly=[*ctx.toolchains.folders, view.objects],
        shadows=[
            (view.git_file, worktree / ".git"),
            *((p, p) for p in frozen),
            *((worktree / p, worktree / p) for p in frozen_tests),
        ],
    )


def setup_sandbox(ctx: RunContext) -> Sandbox | None:
    """The checks' sandbox with the package registries reachable, whatever the checks may
    reach: the repository's `setup` downloads its dependencies, and only those."""
    sandbox = _gate_sandbox(ctx)
    if sandbox is None:
        return None
    return replace(sandbox, network=SandboxNetwork.REGISTRIES, api_hosts=REGISTRY_ENDPOINTS)
