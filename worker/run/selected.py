"""Chosen tests run again: a story's new tests on its parent, a failing test alone on both sides."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from worker.model.gates import MISSING, GateResult
from worker.model.state import FrozenTests
from worker.run.calls import run_gates_on
from worker.run.context import RunContext
from worker.verdict.flaky import RERUNS, Reruns
from worker.verdict.judging import tests_by_id


def run_selected(
    ctx: RunContext, label: str, test_ids: Collection[str], *, narrow: bool = False
) -> dict[str, str]:
    """These tests' statuses on the worktree as it is (MISSING for one not reported).

    The one place chosen tests are run (the tests call's proof, the parent proof, their
    like-with-like run on the story's commit and the flaky re-runs all come through here):
    only the gates that run tests, and in them only these tests where the runner can select
    them (`only=`: pytest, go, jest, vitest); other runners run whole and only these ids are
    kept. `narrow`: a fail-to-pass proof, where
    pytest collects only their files (run_gates_on)."""
    results = run_gates_on(ctx, label, fail_fast=False, only=test_ids, narrow=narrow)
    reported = tests_by_id(results) or {}
    return {t: str(reported[t]) if t in reported else MISSING for t in test_ids}


def run_files(ctx: RunContext, label: str, files: Sequence[str]) -> list[GateResult]:
    """The tests these test files hold, alone where the runner can select them (pytest by
    the file's path, jest and vitest by the file; others run whole): the gates' results.
    A fail-to-pass proof (the tests call's): pytest collects only these files."""
    return run_gates_on(ctx, label, fail_fast=False, only=files, narrow=True)


def run_as_proven(
    ctx: RunContext, label: str, test_ids: Collection[str], *, files: Sequence[str] = ()
) -> dict[str, str]:
    """A story's new tests' statuses on the worktree as it is, run as a fail-to-pass proof:
    the one selection both its parent and its head run them with, so what the two say is
    alike (a test that tells a narrowed run from the whole suite's behaves the same in
    both). `files`: the test files its tests call's proof ran (run_files); otherwise these
    ids and their modules, narrowed. A module that could not be imported is reported as one
    failure named after it: its tests failed."""
    if files:
        found = tests_by_id(run_files(ctx, label, files)) or {}
        return {t: str(found[t]) if t in found else MISSING for t in test_ids}
    modules = {t.split("::", 1)[0] for t in test_ids}
    tests = run_selected(ctx, label, {*test_ids, *modules}, narrow=True)
    return {t: tests[t] if tests[t] != MISSING else tests[t.split("::", 1)[0]] for t in test_ids}


def alike_at_head(
    ctx: RunContext,
    label: str,
    frozen: FrozenTests | None,
    test_ids: Collection[str],
    *,
    checked: tuple[Collection[str], Sequence[GateResult]] | None = None,
) -> dict[str, str] | None:
    """A story's new tests on its commit (checked out), run exactly as their proof on its
    parent ran (run_as_proven); None when that proof was a whole run, as the commit's own.
    `checked`: the scope and results of the commit's own check, when it ran part of the
    suite (`checks: affected`): a scope of exactly the proof's files ran them as the proof
    did, so its results are the like-with-like ones and nothing runs again."""
    files = frozen.proof_selected if frozen is not None else []
    if frozen is not None and not files:
        return None
    if checked is not None and {s for s in checked[0] if s.endswith(".py")} == set(files):
        found = tests_by_id(checked[1]) or {}
        return {t: str(found[t]) if t in found else MISSING for t in test_ids}
    return run_as_proven(ctx, f"{label}.alike", test_ids, files=files)


def rerun_alone(
    ctx: RunContext, label: str, *, parent: str, commit: str, test_ids: Sequence[str]
) -> Reruns:
    """Tests that passed on `parent` and failed on `commit`, each run again RERUNS times on
    both: first on the story's commit (checked out now), then on its parent."""
    story: dict[str, list[str]] = {t: [] for t in test_ids}
    on_parent: dict[str, list[str]] = {t: [] for t in test_ids}
    for n in range(1, RERUNS + 1):
        for test_id, status in run_selected(ctx, f"{label}.rerun{n}", test_ids).items():
            story[test_id].append(status)
    with ctx.git.parent_with(parent, commit, ()):
        for n in range(1, RERUNS + 1):
            for test_id, status in run_selected(ctx, f"{label}.parent.rerun{n}", test_ids).items():
                on_parent[test_id].append(status)
    return Reruns(story=story, parent=on_parent)
