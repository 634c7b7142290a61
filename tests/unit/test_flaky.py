"""The flaky rule: a test that passed before and failed with the story, re-run alone."""

from __future__ import annotations

import pytest

from worker.verdict.flaky import Rerun, Reruns, judge_reruns

P, F, S, M = "passed", "failed", "skipped", "missing"


@pytest.mark.parametrize(
    ("story", "parent", "rerun"),
    [
        # Its result changes without the story's change: flaky, whatever it does with it.
        ([P, F], [P, F], Rerun.FLAKY),
        ([F, F], [F, P], Rerun.FLAKY),
        # Passed in the parent's whole run, fails there alone every time: it depends on the
        # tests run before it, not on chance; alone it passes with the story. Not flaky.
        ([P, P], [F, F], Rerun.UNSTABLE),
        ([F, F], [F, F], Rerun.BROKEN),
        # Steady without the change, flipping with it: the story made it unstable.
        ([P, F], [P, P], Rerun.UNSTABLE),
        ([P, P], [P, P], Rerun.UNSTABLE),
        # Fails every time with the story and passes every time without: the story broke it.
        ([F, F], [P, P], Rerun.BROKEN),
        # A re-run that gave no result shows nothing: the failure counts.
        ([M, M], [M, M], Rerun.BROKEN),
        ([S, S], [P, S], Rerun.BROKEN),
        ([], [], Rerun.BROKEN),
    ],
)
def test_a_test_that_failed_with_the_story_is_judged_on_its_reruns(
    story: list[str], parent: list[str], rerun: Rerun
) -> None:
    found = judge_reruns(["t"], Reruns(story={"t": story}, parent={"t": parent}))["t"]
    assert found.rerun is rerun
    assert found.flaky is (rerun is Rerun.FLAKY)
    # The first runs count too: failed with the story, passed before it.
    assert (found.story, found.parent) == ((F, *story), (P, *parent))


def test_each_test_is_judged_on_its_own_reruns() -> None:
    found = judge_reruns(
        ["a", "b"], Reruns(story={"a": [F, F], "b": [P, F]}, parent={"a": [P, P], "b": [F, P]})
    )
    assert {t: f.rerun for t, f in found.items()} == {"a": Rerun.BROKEN, "b": Rerun.FLAKY}
    assert (
        found["b"].said()
        == "with the story: failed, passed, failed; without it: passed, failed, passed"
    )
