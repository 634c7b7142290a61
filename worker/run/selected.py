"""Chosen tests run again: a story's new tests on its parent, a failing test alone on both sides."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from worker.model.gates import GateResult
from worker.run.calls import run_gates_on
from worker.run.context import RunContext
from worker.verdict.flaky import RERUNS, Reruns
from worker.verdict.judging import MISSING, tests_by_id


def run_selected(
    ctx: RunContext, label: str, test_ids: Collection[str], *, narrow: bool = False
) -> dict[str, str]:
    """These tests' statuses on the worktree as it is (MISSING for one not reported).

    The one place chosen tests are run (the tests call's proof, the parent proof and the
    flaky re-runs all come through here): only the gates that run tests, and in them only
    these tests where the runner can select them (`only=`: pytest, go, jest, vitest); other
    runners run whole and only these ids are kept. `narrow`: a fail-to-pass proof, where
    pytest collects only their files (run_gates_on)."""
    results = run_gates_on(ctx, label, fail_fast=False, only=test_ids, narrow=narrow)
    reported = tests_by_id(results) or {}
    return {t: str(reported[t]) if t in reported else MISSING for t in test_ids}


def run_files(ctx: RunContext, label: str, files: Sequence[str]) -> list[GateResult]:
    """The tests these test files hold, alone where the runner can select them (pytest by
    the file's path, jest and vitest by the file; others run whole): the gates' results.
    A fail-to-pass proof (the tests call's): pytest collects only these files."""
    return run_gates_on(ctx, label, fail_fast=False, only=files, narrow=True)


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
