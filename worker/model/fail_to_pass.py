"""Which of a story's tests showed its work: what the verdict counts and the PR and the
progress comment say, in one place."""

from __future__ import annotations

from worker.model.gates import MISSING, TestStatus
from worker.model.state import TestCheck


def fail_to_pass(check: TestCheck) -> bool:
    """A test of the story's own that showed its work: it passes now, and failed without
    the story's change (an added test on its parent; a test it owns before it)."""
    if not check.owned or check.problem or check.after != TestStatus.PASSED:
        return False
    if check.added:
        return check.at_parent in (TestStatus.FAILED, MISSING)
    return check.before == TestStatus.FAILED
