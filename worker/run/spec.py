"""What a run is asked to do: the requirement and the run's inputs, as plain data."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from worker.confine.limits import DEFAULT_LIMITS, ResourceLimits
from worker.confine.sandbox import Sandbox
from worker.git.runner import CredentialsProvider
from worker.model.repo_config import RepoConfig
from worker.model.run_ids import check_run_id


@dataclass(frozen=True)
class Requirement:
    """What to build: the text (data, never a template) and where it came from."""

    text: str
    source: str  # "docs/requirements/REQ-001-x.md", "ISSUE-3", ...
    slug: str  # the branch is reqdrive/<slug>
    repo_path: str | None = None  # the file in the repository, which the agent may not edit

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8", errors="surrogatepass")).hexdigest()


class SharedBudget(Protocol):
    """Spend counted beyond this run (the App counts an installation's month in Redis): asked
    before every agent call, told what each call cost."""

    def reached(self) -> str | None:
        """Why no agent call may start now ("... $20.13 of $20.00 ..."), or None."""
        ...

    def charge(self, cost_usd: float) -> None:
        """Count what one agent call of this run cost."""
        ...

    def remaining(self) -> float | None:
        """USD left before the cap (read again while a call streams its turns, as other runs
        spend too); None: no cap."""
        ...


@dataclass(frozen=True)
class RunSpec:
    """One run's inputs: plain data, so a job and the command line build it alike."""

    run_id: str
    requirement: Requirement
    remote_url: str
    work_dir: Path
    base_ref: str | None = None
    agent_runner: str | None = None  # overrides the repository's agent.runner
    agent_command: str | None = None  # the command runner's template
    # Fresh credentials before every fetch and push (None: the remote needs none).
    credentials: CredentialsProvider | None = None
    secrets: tuple[str, ...] = ()
    # The environment the agent's allowlisted variables (PATH, locale, its API key), git's
    # (PATH, proxies, CA files, the SSH agent) and the gates' PATH come from: given by the
    # caller, never read here.
    source_env: Mapping[str, str] = field(default_factory=dict)
    # The runner when neither agent_runner nor the repository's config names one.
    default_runner: str = "claude"
    # PATH for the gates (the operator's interpreter and tools first); default source_env's.
    gate_path: str | None = None
    # Where agent calls and gates run (REQDRIVE_SANDBOX); None runs them unconfined.
    sandbox: Sandbox | None = None
    # Disk, report and scan limits of the run (the sandbox carries the per-call ones).
    limits: ResourceLimits = DEFAULT_LIMITS
    # Stories to run again from the existing checkpoint (attempts reset, branch kept), and
    # whether every story that ended without passing is run again too.
    retry: tuple[str, ...] = ()
    retry_failed: bool = False
    # A reviewed prd.json (`reqdrive run --plan FILE`): used instead of asking the agent, and
    # validated like an agent-written one.
    plan_text: str | None = None
    # Stop once the plan is made (`reqdrive plan`, `/reqdrive plan`): the engine cancels its
    # own story loop, so no story starts whatever a reporter does or how late it hears.
    plan_only: bool = False
    # Asked before each story: a newer text of the requirement waits to run (a push edited
    # it), so the loop stops after the story it is on, which is never cut short.
    superseded: Callable[[], bool] | None = None
    # Spend shared with other runs (the installation's monthly budget), checked before every
    # agent call and between a streaming call's turns like the run's own budgetUsd; None:
    # only budgetUsd limits the run.
    shared_budget: SharedBudget | None = None
    # A person asked for this job (not a worker taking over a lost run): a run taken up
    # again from its checkpoint gets its budgetUsd anew, counted from its cost so far.
    new_budget: bool = False
    # The run of this requirement's earlier text on the same branch (the App's run of an
    # edited requirement): its plan is shown to the planner, and the stories the edit left
    # as they were keep its results (worker/run/replan.py).
    previous_run: str | None = None
    # The config to use instead of the base commit's, and its path (`--config-from-worktree`).
    config_override: tuple[RepoConfig, str] | None = None
    # Where the worker keeps its own bytecode of library modules for the checks
    # (confine/bytecode_seed.py); None: the work dir's. It depends only on the worker's
    # interpreter, so runs of several work dirs may share one; never a folder an agent sees.
    bytecode_seed: Path | None = None

    def __post_init__(self) -> None:
        # The run id names folders under the work dir: refused before any of them is made.
        check_run_id(self.run_id)
