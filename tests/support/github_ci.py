"""CI in the GitHub stand-ins: workflow runs, their jobs and logs, check suites, annotations.

Every answer is built from the example GitHub's OpenAPI description gives for the operation
(`components/examples`, in tests/fixtures/github/openapi.json) with the scene's values put in;
deliveries from GitHub's own `check_suite` and `workflow_run` example payloads. A job's log is
served as GitHub does: `GET .../actions/jobs/{id}/logs` answers 302 to a download URL on the
double's host (outside the API, no token), which answers the log as plain text.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from tests.support import webhooks
from tests.support.github_api import DESCRIPTION
from tests.support.github_http import REPO, _public, _route

if TYPE_CHECKING:
    from tests.support.github_double.server import GitHubDouble
    from tests.support.github_http import FakeGitHub

LOG_DOWNLOADS = "/_ci-logs/"  # where the double serves job logs (GitHub: another host)
ACTIONS = {"id": 15368, "slug": "github-actions", "name": "GitHub Actions"}


@dataclass(frozen=True)
class Redirect:
    """A route's 302: where the client is sent."""

    location: str


@dataclass(frozen=True)
class CiJob:
    """One job of a workflow run as a test sets it: its name, conclusion, log, annotations
    (each {"path", "line", "message", "level"})."""

    name: str
    conclusion: str = "success"
    log: str = ""
    annotations: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CiState:
    runs: dict[int, dict[str, Any]] = field(default_factory=dict)
    jobs: dict[int, dict[str, Any]] = field(default_factory=dict)  # job id → job (+ _log)


def ci(gh: FakeGitHub) -> CiState:
    state: CiState = gh.__dict__.setdefault("_ci", CiState())
    return state


@cache
def _examples() -> dict[str, Any]:
    examples: dict[str, Any] = json.loads(DESCRIPTION.read_text())["components"]["examples"]
    return examples


def _example(name: str) -> Any:
    return copy.deepcopy(_examples()[name]["value"])


def add_workflow_run(
    gh: FakeGitHub, repo: str, *, head_sha: str, branch: str, name: str, jobs: list[CiJob]
) -> dict[str, Any]:
    """A completed workflow run on `head_sha` with these jobs (each also a check run of
    GitHub Actions, in the run's check suite); the run, with its conclusion."""
    run_id, suite_id = next(gh.ids), next(gh.ids)
    failed = any(j.conclusion in ("failure", "timed_out") for j in jobs)
    run: dict[str, Any] = {
        "id": run_id,
        "name": name,
        "head_sha": head_sha,
        "head_branch": branch,
        "check_suite_id": suite_id,
        "conclusion": "failure" if failed else "success",
        "_repo": repo,
        "_jobs": [],
    }
    for job in jobs:
        run["_jobs"].append(_add_job(gh, repo, run, job))
    ci(gh).runs[run_id] = run
    return run


def _add_job(gh: FakeGitHub, repo: str, run: dict[str, Any], job: CiJob) -> int:
    job_id = next(gh.ids)
    api = f"{gh.api}/repos/{repo}"
    record = _example("job-paginated")["jobs"][0]
    record.update(
        {
            "id": job_id,
            "run_id": run["id"],
            "run_url": f"{api}/actions/runs/{run['id']}",
            "head_sha": run["head_sha"],
            "head_branch": run["head_branch"],
            "workflow_name": run["name"],
            "name": job.name,
            "url": f"{api}/actions/jobs/{job_id}",
            "html_url": f"{gh.web}/{repo}/actions/runs/{run['id']}/job/{job_id}",
            "check_run_url": f"{api}/check-runs/{job_id}",
            "status": "completed",
            "conclusion": job.conclusion,
            # Required by the job schema, absent from the description's own example.
            "created_at": record["started_at"],
        }
    )
    ci(gh).jobs[job_id] = {**record, "_log": job.log}
    check = _example("check-run-paginated")["check_runs"][0]
    check.update(
        {
            "id": job_id,
            "name": job.name,
            "head_sha": run["head_sha"],
            "external_id": "",
            "url": f"{api}/check-runs/{job_id}",
            "status": "completed",
            "conclusion": job.conclusion,
            "check_suite": {"id": run["check_suite_id"]},
            "app": {**check["app"], **ACTIONS},
            "pull_requests": [],
            "_repo": repo,
            "_annotations": [_annotation(a) for a in job.annotations],
        }
    )
    check["output"].update(
        {
            "title": None,
            "summary": None,
            "text": None,
            "annotations_count": len(job.annotations),
            "annotations_url": f"{api}/check-runs/{job_id}/annotations",
        }
    )
    gh.check_runs[job_id] = check
    return job_id


def _annotation(given: dict[str, Any]) -> dict[str, Any]:
    annotation: dict[str, Any] = _example("check-annotation-items")[0]
    line = int(given.get("line", 1))
    annotation.update(
        {
            "path": given["path"],
            "start_line": line,
            "end_line": line,
            "start_column": None,
            "end_column": None,
            "annotation_level": given.get("level", "failure"),
            "title": given.get("title", ""),
            "message": given["message"],
            "raw_details": None,
        }
    )
    return annotation


def pull_ref(gh: FakeGitHub, repo: str, number: int) -> dict[str, Any]:
    """A pull request as check_suite and workflow_run payloads name it."""
    pull = gh.pulls[(repo, number)]
    record = gh.repos[repo]
    side = {"id": record["id"], "url": record["url"], "name": record["name"]}
    return {
        "url": pull["url"],
        "id": pull["id"],
        "number": number,
        "head": {"ref": pull["head"]["ref"], "sha": pull["head"]["sha"], "repo": side},
        "base": {"ref": pull["base"]["ref"], "sha": pull["base"]["sha"], "repo": side},
    }


def ci_result_fields(run: dict[str, Any], pulls: list[dict[str, Any]]) -> dict[str, Any]:
    """What a workflow_run payload's `workflow_run` says of this run."""
    return {
        "id": run["id"],
        "name": run["name"],
        "head_sha": run["head_sha"],
        "head_branch": run["head_branch"],
        "check_suite_id": run["check_suite_id"],
        "status": "completed",
        "conclusion": run["conclusion"],
        "pull_requests": pulls,
    }


# routes ------------------------------------------------------------------------------------


@_route("GET", REPO + r"/actions/runs/(?P<id>\d+)/jobs")
def _run_jobs(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    run = ci(gh).runs.get(int(m["id"]))
    if run is None or run["_repo"] != m["repo"]:
        return 404, {"message": "Not Found"}
    jobs = [_public(ci(gh).jobs[j]) for j in run["_jobs"]]
    return {"total_count": len(jobs), "jobs": jobs}


@_route("GET", REPO + r"/actions/jobs/(?P<id>\d+)/logs")
def _job_logs(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    if int(m["id"]) not in ci(gh).jobs:
        return 404, {"message": "Not Found"}
    return 302, Redirect(f"{gh.web}{LOG_DOWNLOADS}{m['id']}?signed=1")


@_route("GET", REPO + r"/check-suites/(?P<id>\d+)/check-runs")
def _suite_runs(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    runs = [
        _public(r)
        for r in gh.check_runs_of(m["repo"])
        if (r.get("check_suite") or {}).get("id") == int(m["id"])
    ]
    return {"total_count": len(runs), "check_runs": runs}


@_route("GET", REPO + r"/check-runs/(?P<id>\d+)/annotations")
def _annotations(gh: FakeGitHub, m: re.Match[str], body: Any, q: Any) -> Any:
    run = gh.check_runs.get(int(m["id"]))
    if run is None:
        return 404, {"message": "Not Found"}
    return list(run.get("_annotations", []))


def download(gh: FakeGitHub, path: str) -> tuple[int, dict[str, str], str]:
    """The log behind a download URL: plain text, no token asked (GitHub signs the URL)."""
    job = ci(gh).jobs.get(int(path.removeprefix(LOG_DOWNLOADS).split("?")[0] or 0))
    if job is None:
        return 404, {"Content-Type": "text/plain"}, "Not Found"
    return 200, {"Content-Type": "text/plain; charset=utf-8"}, str(job["_log"])


def workflow_run_example() -> dict[str, Any]:
    return webhooks.example("workflow_run", "completed.3.payload.json")


def workflow_run_payload(
    gh: GitHubDouble, repo: str, run: dict[str, Any], *, pulls: list[int], sender: str
) -> dict[str, Any]:
    """workflow_run.completed for this run, naming these pull requests as GitHub does."""
    payload = workflow_run_example()
    gh._scene(repo, payload, gh.sender(sender, "Bot" if sender.endswith("[bot]") else "User"))
    fields = ci_result_fields(run, [pull_ref(gh, repo, n) for n in pulls])
    payload["workflow_run"].update(fields)
    return payload


def check_suite_payload(
    gh: GitHubDouble,
    repo: str,
    *,
    head_sha: str,
    conclusion: str,
    pulls: list[int],
    app_id: int,
    app_slug: str,
    sender: str = "alice",
) -> dict[str, Any]:
    """check_suite.completed of an App's checks on `head_sha`."""
    payload = webhooks.example("check_suite", "completed.payload.json")
    gh._scene(repo, payload, gh.sender(sender))
    suite = payload["check_suite"]
    suite.update(
        {
            "id": next(gh.ids),
            "head_sha": head_sha,
            "after": head_sha,
            "conclusion": conclusion,
            "pull_requests": [pull_ref(gh, repo, n) for n in pulls],
        }
    )
    suite["app"].update({"id": app_id, "slug": app_slug, "name": app_slug})
    return payload
