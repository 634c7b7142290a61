"""What the repository's CI said on a commit: failed jobs' logs and annotations, and its checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import requests

from bot.github.client import CHECK_NAME, RepoClient

# A job's log can be hundreds of MiB; its end is where a runner summarises what failed, so
# only the last LOG_TAIL_BYTES are kept while the download streams by.
LOG_TAIL_BYTES = 512 * 1024
LOG_CHUNK_BYTES = 64 * 1024
LOG_TIMEOUT_S = 30.0
MAX_FAILED_JOBS = 10  # per workflow run or check suite: the first ones tell the story
FAILED = frozenset({"failure", "timed_out"})
ACTIONS_SLUG = "github-actions"  # whose check runs are Actions jobs (job id = check run id)


@dataclass(frozen=True)
class FailedCheck:
    """One failed job or check run: its name, the tail of its log, its annotations."""

    name: str
    log: str = ""
    annotations: list[str] = field(default_factory=list)  # "path:line: message"
    summary: str = ""  # the check run's own output (title, summary, text)


@dataclass(frozen=True)
class CheckState:
    """One check run on a commit, as the head's CI state is judged."""

    name: str
    app: str
    status: str
    conclusion: str | None


def failed_checks(
    client: RepoClient, *, workflow_run_id: int | None = None, check_suite_id: int | None = None
) -> list[FailedCheck]:
    """The failed jobs of a workflow run, or the failed check runs of a check suite, each
    with its log's tail (Actions only) and annotations."""
    base = f"/repos/{client.full_name}"
    if workflow_run_id is not None:
        listing = _get(client, f"{base}/actions/runs/{workflow_run_id}/jobs", per_page="100")
        jobs = [j for j in listing.get("jobs", []) if j.get("conclusion") in FAILED]
        return [_from_job(client, job) for job in jobs[:MAX_FAILED_JOBS]]
    if check_suite_id is not None:
        listing = _get(client, f"{base}/check-suites/{check_suite_id}/check-runs", per_page="100")
        runs = [r for r in listing.get("check_runs", []) if r.get("conclusion") in FAILED]
        return [_from_check_run(client, run) for run in runs[:MAX_FAILED_JOBS]]
    return []


def head_checks(client: RepoClient, sha: str) -> list[CheckState]:
    """Every check run on `sha` but reqdrive's own."""
    listing = _get(client, f"/repos/{client.full_name}/commits/{sha}/check-runs", per_page="100")
    return [
        CheckState(
            name=str(run.get("name", "")),
            app=str((run.get("app") or {}).get("slug") or ""),
            status=str(run.get("status", "")),
            conclusion=run.get("conclusion"),
        )
        for run in listing.get("check_runs", [])
        if run.get("name") != CHECK_NAME
    ]


def _from_job(client: RepoClient, job: dict[str, Any]) -> FailedCheck:
    job_id = int(job["id"])
    return FailedCheck(
        name=str(job.get("name", job_id)),
        log=job_log(client, job_id),
        annotations=_annotations(client, job_id),
    )


def _from_check_run(client: RepoClient, run: dict[str, Any]) -> FailedCheck:
    run_id = int(run["id"])
    output = run.get("output") or {}
    said = [str(output.get(k) or "") for k in ("title", "summary", "text")]
    is_actions = (run.get("app") or {}).get("slug") == ACTIONS_SLUG
    return FailedCheck(
        name=str(run.get("name", run_id)),
        log=job_log(client, run_id) if is_actions else "",
        annotations=_annotations(client, run_id),
        summary="\n".join(s for s in said if s),
    )


def job_log(client: RepoClient, job_id: int) -> str:
    """The tail of an Actions job's log. GitHub answers 302 to a short-lived download URL on
    another host: it is fetched without the installation token, which must not leave for it."""
    url = f"/repos/{client.full_name}/actions/jobs/{job_id}/logs"

    def location() -> str | None:
        headers, _ = client.gh.requester.requestBlobAndCheck("GET", url)
        return headers.get("location")

    where = client.read(location)
    if not where:
        return ""
    tail = b""
    try:
        with requests.get(where, stream=True, timeout=LOG_TIMEOUT_S) as answer:
            answer.raise_for_status()
            for chunk in answer.iter_content(LOG_CHUNK_BYTES):
                tail = (tail + chunk)[-LOG_TAIL_BYTES:]
    except requests.RequestException as error:  # expired or gone: the annotations remain
        return f"(the job's log could not be downloaded: {type(error).__name__})"
    return tail.decode("utf-8", errors="replace")


def _annotations(client: RepoClient, check_run_id: int) -> list[str]:
    url = f"/repos/{client.full_name}/check-runs/{check_run_id}/annotations"
    found = client.read(
        lambda: client.gh.requester.requestJsonAndCheck("GET", url, parameters={"per_page": "50"})
    )[1]
    return [
        f"{a.get('path')}:{a.get('start_line')}: {a.get('annotation_level')}: {a.get('message')}"
        for a in (found if isinstance(found, list) else [])
        if a.get("annotation_level") in ("failure", "warning")
    ]


def _get(client: RepoClient, url: str, **parameters: str) -> dict[str, Any]:
    _, data = client.read(
        lambda: client.gh.requester.requestJsonAndCheck("GET", url, parameters=parameters)
    )
    return data if isinstance(data, dict) else {}
