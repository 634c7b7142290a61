"""Which tests a story's check runs: the whole suite, or (`checks: affected`) the test files
its change can reach, while the whole suite is left to judge the branch's head at the end."""

from __future__ import annotations

from collections.abc import Sequence

from worker.model.gates import GateResult, Runner
from worker.model.repo_config import StoryChecks
from worker.model.state import FrozenTests, StoryRecord, StoryState
from worker.run.calls import run_gates_on
from worker.run.context import RunContext
from worker.verdict.affected import affected_test_files
from worker.verdict.collect import runs_tests
from worker.verdict.judging import partly_judged, tests_by_id
from worker.verdict.runners import runner_of
from worker.verdict.tampering import added_files


def story_scope(
    ctx: RunContext,
    record: StoryRecord,
    frozen: FrozenTests | None,
    changed: Sequence[str],
    span: tuple[str, str] | None = None,
) -> list[str] | None:
    """The test files (and the story's own test ids) this story's check runs, or None for
    the whole suite.

    Part of the suite only with `checks: affected`, frozen tests, per-test results at the
    baseline and every test gate a pytest one (the runner that selects by file), and only
    while the whole suite still has to run later: another story remains, or an earlier
    story's check already ran part of it (verify runs it whole at the head). A one-story run
    pays for the whole suite once either way. None too when the change reaches what no import
    graph can tell (affected.py), such as a conftest or a data file."""
    cp, config = ctx.cp, ctx.config
    if config.checks is not StoryChecks.AFFECTED or frozen is None:
        return None
    if tests_by_id(cp.baseline or []) is None:
        return None
    tested = [g for g in ctx.gates if runs_tests(g, runner_of(g))]
    if not tested or any(runner_of(g) is not Runner.PYTEST for g in tested):
        return None
    # Options given on the command line, which the selection (reading config files) misses.
    if "PYTEST_ADDOPTS" in ctx.gate_env or any("doctest" in g.command for g in tested):
        return None
    if not _others_remain(cp.stories, record, config.max_story_retries) and not partly_judged(
        cp.stories
    ):
        return None
    reached = affected_test_files(ctx.git.path, changed, ctx.test_side)
    if reached is None:
        return None
    # A module the story added (between the commits of `span`) off the test side is selected
    # only for its own doctests (--doctest-modules), which are new: nothing there passed before.
    added = added_files(ctx.git.path, *span) if span else []
    reached = [p for p in reached if p not in added or ctx.test_side.covers(p)]
    # Its own tests by their ids too: the runner selects them whatever folder it names
    # modules from.
    return sorted({*reached, *frozen.tests, *frozen.changed_passing, *record.tests})


def _others_remain(stories: Sequence[StoryRecord], record: StoryRecord, retries: int) -> bool:
    """Is a story other than this one still to be attempted?"""
    return any(
        s is not record and s.state is StoryState.PENDING and len(s.attempts) < retries
        for s in stories
    )


def story_checks(
    ctx: RunContext, label: str, scope: list[str] | None, *, fail_fast: bool
) -> list[GateResult]:
    """The story's check: every gate whole, or (`scope`) its test gates on those tests
    alone, pytest collecting no other file, and the other gates whole."""
    if scope is None:
        return run_gates_on(ctx, label, fail_fast=fail_fast)
    return run_gates_on(ctx, label, fail_fast=fail_fast, only=scope, narrow=True, every_gate=True)
