"""Thin RQ entry points: plain JSON keyword arguments in, GitHub and the engine driven from here."""

from __future__ import annotations

import logging
from typing import Any

from bot.github.auth import RUN_PERMISSIONS
from bot.jobs.ci_fix import handle_ci_fix, handle_hand_off
from bot.jobs.drive import AlreadyRunning, execute
from bot.jobs.feedback import handle_feedback
from bot.jobs.handlers import (
    handle_cancel,
    handle_close,
    handle_help,
    handle_plan,
    handle_retry,
    handle_run,
    handle_scan,
    handle_status,
)
from bot.jobs.job_frame import run_job
from bot.jobs.lifecycle import drop_installation_runs, forget_run
from bot.jobs.runtime import current
from bot.requests import JobKind, RunRequest

log = logging.getLogger(__name__)


def run_requirement(**arguments: Any) -> dict[str, object]:
    """Plan (if needed) and implement one requirement."""
    return run_job(JobKind.RUN, arguments, handle_run)


def retry_stories(**arguments: Any) -> dict[str, object]:
    """Re-run one story ("/reqdrive retry US-003") or every failed one."""
    return run_job(JobKind.RETRY, arguments, handle_retry)


def plan_requirement(**arguments: Any) -> dict[str, object]:
    """Plan only and post the stories for review."""
    return run_job(JobKind.PLAN, arguments, handle_plan)


def cancel_run(**arguments: Any) -> dict[str, object]:
    """Stop the requirement's run; it keeps what passed."""
    return run_job(JobKind.CANCEL, arguments, handle_cancel)


def report_status(**arguments: Any) -> dict[str, object]:
    """Reply with the requirement's run state."""
    return run_job(JobKind.STATUS, arguments, handle_status)


def reply_help(**arguments: Any) -> dict[str, object]:
    """Reply with the commands reqdrive understands."""
    return run_job(JobKind.HELP, arguments, handle_help)


def close_run(**arguments: Any) -> dict[str, object]:
    """A reqdrive pull request was closed or merged: its run stops (what passed stays pushed)."""
    return run_job(JobKind.CLOSE, arguments, handle_close)


def drop_installation(**arguments: Any) -> dict[str, object]:
    """The App was uninstalled: its tokens are forgotten, its running runs stopped and every
    run's state, its spend and run slots removed. No API call: the installation's tokens
    stopped working with the uninstall."""
    request = RunRequest.model_validate(arguments)
    if request.kind is not JobKind.UNINSTALL or request.installation_id is None:
        raise ValueError(f"a {request.kind} request reached the uninstall job")
    rt = current()
    installation = request.installation_id
    dropped = rt.app.auth.drop_installation(installation)
    stopped = drop_installation_runs(rt, installation)
    rt.writes.forget(installation)
    rt.spend.forget(installation)  # a new install of the App is a new installation id
    rt.slots.forget(installation)
    extra = {"installation_id": installation, "runs": stopped}
    log.info("installation dropped", extra=extra)
    return {"status": "dropped", "tokens": dropped, "runs_stopped": stopped}


def scan_push(**arguments: Any) -> dict[str, object]:
    """A push whose payload may not list every file, or that names a requirement outside the
    default folder: read the repository's requirementsDir, ask GitHub which requirement files
    the push changed there and queue their runs as intake would have (same job ids, dedupe,
    coalescing)."""
    return run_job(JobKind.SCAN, arguments, handle_scan)


def fix_ci(**arguments: Any) -> dict[str, object]:
    """CI that is not reqdrive's completed on a reqdrive PR's head: a failure gets a CI-fix
    story on the branch while attempts last; a success after a fix is said once."""
    return run_job(JobKind.CI_FIX, arguments, handle_ci_fix)


def hand_off(**arguments: Any) -> dict[str, object]:
    """A person pushed to a reqdrive branch: its pull request's CI is theirs to fix now."""
    return run_job(JobKind.HANDOFF, arguments, handle_hand_off)


def address_feedback(**arguments: Any) -> dict[str, object]:
    """A review or `/reqdrive fix` on a reqdrive PR: its unanswered threads run as FB- stories."""
    return run_job(JobKind.FEEDBACK, arguments, handle_feedback)


def resume_run(run_id: str) -> dict[str, object]:
    """Take over a run whose worker stopped beating (killed, machine gone), from its checkpoint."""
    rt = current()
    record = rt.records.load(run_id)
    if record is None:
        return {"status": "unknown run"}
    if (gone := rt.records.gone(run_id)) is not None:  # its pull request closed, or uninstalled
        forget_run(rt, record)
        return {"status": f"not resumed: {gone}", "run_id": run_id}
    client = rt.app.client(record.installation_id, record.repo, RUN_PERMISSIONS)
    record.resumed += 1
    note = (
        f"♻️ The worker running this stopped without finishing; another worker resumed the run "
        f"from its checkpoint (takeover {record.resumed})."
    )
    try:
        labels = record.arguments.get("labels", ())
        result = execute(rt, client, record, labels=labels, note=note, takeover=True)
    except AlreadyRunning:
        return {"status": "running elsewhere"}
    return {"status": "finished" if result else "failed", "run_id": run_id}
