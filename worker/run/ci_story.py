"""A CI-fix story's start: the tests CI failed, run by the worker's own checks on the branch."""

from __future__ import annotations

import logging
import re

from worker.model.gates import TestStatus
from worker.model.state import StoryRecord
from worker.run.context import RunContext
from worker.run.selected import run_selected

log = logging.getLogger(__name__)

NOT_REPRODUCED = "not reproduced locally: the next CI result judges it"
PYTEST_NODE_RE = re.compile(r"^(?P<path>[^:\[]+)\.py(?P<rest>::.*)$")


def result_id(test_id: str) -> str:
    """A test id as a CI log names it, as the worker's gates report it: pytest's node id
    ("tests/test_x.py::TestA::test_b[1]") becomes its JUnit id ("tests.test_x.TestA::test_b[1]",
    as worker/verdict/pytest_plugin names results); other runners' ids are the same in both."""
    node = PYTEST_NODE_RE.match(test_id)
    if node is None:
        return test_id
    names = node["rest"].removeprefix("::")
    path, _, params = names.partition("[")
    parts = path.split("::")
    classes = [node["path"].replace("/", "."), *parts[:-1]]
    return ".".join(classes) + "::" + parts[-1] + ("[" + params if params else "")


def reproduce_ci(ctx: RunContext, record: StoryRecord) -> None:
    """Once per CI-fix story, before its first attempt: the test ids CI's logs named, run
    alone where the gates can select them (`only=`) on the branch as it is. Those failing here
    too become the story's own tests (fail→pass, judged as any story's); without any, the
    story says so: no test shows CI fixed, so at best it ends "needs review" and the next
    CI result decides (story_verdict.unproven)."""
    ci = record.ci
    if ci is None or ci.reproduced is not None:
        return
    reproduced: list[str] = []
    if ci.candidates and ctx.gates:
        ctx.git.restore(ctx.cp.head_sha)
        label = f"{ctx.folder.gates_label(ctx.cp.iteration + 1)}.ci"
        statuses = run_selected(ctx, label, [result_id(t) for t in ci.candidates])
        reproduced = sorted(t for t, s in statuses.items() if s == TestStatus.FAILED)
    ci.reproduced = reproduced
    record.tests = sorted({*record.tests, *reproduced})
    said = (
        f"reproduced locally: {', '.join(reproduced)} fail here too"
        if reproduced
        else NOT_REPRODUCED
    )
    record.notes = f"{record.notes}\n{said}".strip()
    ctx.folder.append_progress(f"{record.id}: CI's failing tests {said}")
    log.info("ci failure reproduced", extra={"story": record.id, "reproduced": reproduced})
    ctx.journal.save()
