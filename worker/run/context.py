"""What every step of a run reads, built once when its workspace is ready (the configure step)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from worker.agents.base import AgentRunner, AgentSettings
from worker.agents.registry import make_runner
from worker.confine.gate_homes import gate_environment
from worker.confine.redact import Redactor
from worker.confine.scratch import RunScratch
from worker.confine.toolchains import Toolchains, find_toolchains
from worker.git.at_commit import read_repo_config
from worker.git.changes import RunWorktree
from worker.model.gates import GateSpec
from worker.model.repo_config import RepoConfig
from worker.model.state import Checkpoint
from worker.plan.prompting import TEMPLATE_NAMES, PromptRenderer, load_overrides
from worker.report.protocol import Reporter
from worker.report.run_folder import RunFolder
from worker.review.agent import review_agent
from worker.review.triangular import REVIEW_TEMPLATES, ReviewAgent
from worker.run.journal import RunJournal
from worker.run.spec import RunSpec
from worker.verdict.gates import gate_specs
from worker.verdict.test_side import TestSide

DEFAULT_AGENT_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class RunPlaces:
    """The run's own folders besides its worktree and run folder, each out of the others'
    reach: the agent never sees the run folder (checkpoint, logs, PRD), the gates never see
    the agent's HOME."""

    home: Path  # the agent's HOME
    gate_home: Path  # the gates' HOMEs (and TMPDIRs): a fresh one per gate, under here
    handoff: Path  # where planning leaves prd.json for the worker to read
    git_view: Path  # the agent's own git folder for one call
    # The worker's bytecode of the worktree's modules, for the run's next checks
    # (confine/worktree_bytecode.py): written by the worker alone, given to no agent.
    bytecode: Path

    @property
    def scratch(self) -> RunScratch:
        """These folders as what the agent and its gates write, and the worker's bytecode
        made from what they wrote: swept, then removed."""
        return RunScratch(self.home, self.gate_home, self.handoff, self.git_view, self.bytecode)

    @classmethod
    def of(cls, work_dir: Path, run_id: str) -> RunPlaces:
        return cls(
            home=work_dir / "homes" / run_id,
            gate_home=work_dir / "gatehomes" / run_id,
            handoff=work_dir / "handoff" / run_id,
            git_view=work_dir / "gitviews" / run_id,
            bytecode=work_dir / "bytecode" / run_id,
        )


@dataclass(frozen=True)
class RunContext:
    """A run's inputs and tools, fixed for the whole run; only the journal changes."""

    spec: RunSpec
    journal: RunJournal
    reporter: Reporter
    redactor: Redactor
    folder: RunFolder
    places: RunPlaces
    cancel: threading.Event
    git: RunWorktree
    config: RepoConfig  # read from the base commit, never the agent's branch
    renderer: PromptRenderer
    agent: AgentSettings
    runner: AgentRunner
    gates: tuple[GateSpec, ...]
    gate_env: Mapping[str, str]
    toolchains: Toolchains  # what the sandbox shows of the host for the gates to start
    forbidden: list[str]  # globs the agent may not write
    started: float  # time.monotonic() when the run began
    review: ReviewAgent | None = None  # the blind review's agent; None: `review: off`

    @property
    def cp(self) -> Checkpoint:
        return self.journal.cp

    @property
    def test_side(self) -> TestSide:
        """The files that define or configure the repository's tests (`testPaths`)."""
        return TestSide.of(self.config.test_paths)


def configure(
    spec: RunSpec,
    *,
    journal: RunJournal,
    redactor: Redactor,
    folder: RunFolder,
    places: RunPlaces,
    cancel: threading.Event,
    git: RunWorktree,
    runner: AgentRunner | None,
    started: float,
) -> RunContext:
    """The configure step: the repository's config, prompts, agent and gates, read from the
    base commit; `runner` replaces the configured agent (tests, benchmarks)."""
    base_sha = journal.cp.base_sha
    config, config_path = spec.config_override or read_repo_config(git.path, base_sha)
    settings = AgentSettings(
        runner=spec.agent_runner or config.agent.runner or spec.default_runner,
        model=config.agent_model,
        timeout_s=config.agent.timeout or DEFAULT_AGENT_TIMEOUT_S,
        command=spec.agent_command,
    )
    gates = tuple(gate_specs(config.test_command, config.lint_command, config.gates))
    gate_env = gate_environment(places.gate_home, spec.source_env, path=spec.gate_path)
    commands = [g.command for g in gates] + ([config.setup] if config.setup else [])
    toolchains = _toolchains(spec, commands, gate_env)
    agent_runner = runner or make_runner(settings, redactor=redactor, source_env=spec.source_env)
    # The story's templates and the review's, from one listing of the prompts folder.
    names = (*TEMPLATE_NAMES, *REVIEW_TEMPLATES)
    overrides = load_overrides(git.path, base_sha, config.prompts, names=names)
    context = RunContext(
        spec=spec,
        journal=journal,
        reporter=journal.reporter,
        redactor=redactor,
        folder=folder,
        places=places,
        cancel=cancel,
        git=git,
        config=config,
        renderer=PromptRenderer(
            {n: t for n, t in overrides.items() if n in TEMPLATE_NAMES}, folder=config.prompts
        ),
        agent=settings,
        runner=agent_runner,
        # The checks get no credential, the agent's API key included, and the operator's PATH.
        gate_env=toolchains.environment(gate_env),
        toolchains=toolchains,
        gates=gates,
        forbidden=config.forbidden_globs(spec.requirement.repo_path, config_path),
        started=started,
        review=review_agent(
            config,
            settings,
            agent_runner,
            redactor=redactor,
            source_env=spec.source_env,
            overrides=overrides,
        ),
    )
    places.home.mkdir(parents=True, exist_ok=True)
    return context


def _toolchains(spec: RunSpec, commands: list[str], env: Mapping[str, str]) -> Toolchains:
    """In a sandbox, the interpreters and tools the gates and the setup start, found on
    their PATH."""
    if spec.sandbox is None:
        return Toolchains()
    home = spec.source_env.get("HOME")
    private = [Path(home)] if home else []
    return find_toolchains(commands, env, keep_out=[spec.work_dir.absolute()], private=private)
