"""Stories added to a pull request's run and run on its branch: review feedback (FB-), a CI fix.

The one way anything adds work to a reqdrive pull request after its plan: the stories are
appended to the run's checkpoint (`Checkpoint.add_stories`: pending, after every planned story,
a story whose source some story already answers left out) and the run goes on from its
checkpoint on the pull request's branch, so the engine runs them as ordinary stories (tests
first, judged fail→pass and pass→pass, the earlier stories' frozen tests among the tests that
must keep passing) and the reporter adds their rows to the progress comment, check run and PR.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from bot.github.client import RepoClient
from bot.jobs.drive import execute
from bot.jobs.preflight import Refusal
from bot.jobs.runtime import Runtime
from bot.stores.runs import RunRecord
from worker.model.state import RunResult, StoryRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Added:
    """What adding stories did: the ids added, and the run's result (None: it failed)."""

    story_ids: list[str]
    result: RunResult | None


def run_added_stories(
    rt: Runtime,
    client: RepoClient,
    record: RunRecord,
    stories: Sequence[StoryRecord],
    *,
    labels: Sequence[str] = (),
    head: str | None = None,
    note: str | None = None,
) -> Added:
    """Append `stories` to the run of `record` and run it on its branch; nothing runs when none
    of them is new. The caller checks that no run of `record` is going. `head`: the pull
    request's head now; `note`: said in the progress comment as the run starts."""
    cp = rt.checkpoints.load(record.run_id)
    if cp is None or cp.prd is None:
        raise Refusal(
            "reqdrive has no plan of this pull request's run to add to (its state may have "
            "expired); comment `/reqdrive run` on the requirement to start it again."
        )
    added = cp.add_stories(stories)
    if not added:
        return Added([], None)
    if head is not None and head != cp.head_sha:
        # Commits pushed after the run's (a person's, who then asked again): the stories
        # build on the branch as they left it. The engine refuses anything but commits on
        # top of the run's head (worker/run/resume.py), so nothing of the run is lost.
        cp.head_sha = cp.pushed_sha = head
    rt.checkpoints.save(cp)
    log.info("stories added to the run", extra={"run_id": record.run_id, "stories": added})
    return Added(added, execute(rt, client, record, labels=labels, note=note))
