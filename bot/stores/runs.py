"""What the GitHub side remembers of a run, in Redis: where it reports, liveness, cancel flags."""

from __future__ import annotations

import time
from typing import Any

import redis
from pydantic import BaseModel, Field

RECORD_KEY = "reqdrive:run:{run_id}"
BY_SOURCE_KEY = "reqdrive:run-of:{repo}:{source}"
BY_BRANCH_KEY = "reqdrive:run-of-branch:{repo}:{branch}"
# A running run's owner refreshes this; a worker killed with SIGKILL stops refreshing it, and
# the sweeper in every worker resumes runs whose heartbeat is gone.
HEARTBEAT_KEY = "reqdrive:heartbeat:{run_id}"
ACTIVE_KEY = "reqdrive:active-runs"
CANCEL_KEY = "reqdrive:cancel:{run_id}"
# "closed", "merged" or "uninstalled": the run's pull request or installation is gone, so it
# stops and its state goes (bot/jobs/lifecycle.py), removed by whichever worker ends it. A key of
# its own, not a field of the record, which the running run's reporter saves as it goes.
GONE_KEY = "reqdrive:gone:{run_id}"
RECORD_TTL_S = 30 * 24 * 3600  # as long as the engine keeps checkpoints
HEARTBEAT_TTL_S = 45  # REQDRIVE_HEARTBEAT_TTL_S's default
CANCEL_TTL_S = 3600


class RunRecord(BaseModel):
    """One run as GitHub sees it: the requirement it builds and where it reports."""

    run_id: str
    repo: str
    installation_id: int
    source: str  # "ISSUE-3" or "docs/requirements/REQ-001-x.md"
    text: str  # the requirement as the run started it (a resumed run must build the same)
    slug: str
    repo_path: str | None = None
    branch: str
    base_branch: str
    clone_url: str
    issue_number: int | None = None  # the requirement's issue (label and command triggers)
    comment_target: int | None = None  # the issue or PR holding the progress comment
    comment_id: int | None = None
    check_run_id: int | None = None
    check_sha: str | None = None
    # Annotations the check run already has (their keys): GitHub appends each update's.
    annotated: list[str] = Field(default_factory=list)
    pull_number: int | None = None
    # The run of the requirement's earlier text on the same branch (an edit's run): the new
    # run plans against its plan and keeps its results where the edit left a story as it was.
    previous_run: str | None = None
    job_id: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)  # the job's RunRequest, to resume it
    resumed: int = 0  # how many times another worker took the run over


class RunRecords:
    """RunRecords in Redis, found by run id, by requirement or by branch."""

    def __init__(self, conn: redis.Redis, heartbeat_ttl_s: int = HEARTBEAT_TTL_S) -> None:
        self.conn = conn
        self.heartbeat_ttl_s = heartbeat_ttl_s

    def save(self, record: RunRecord) -> None:
        pipe = self.conn.pipeline()
        pipe.set(RECORD_KEY.format(run_id=record.run_id), record.model_dump_json(), ex=RECORD_TTL_S)
        source_key = BY_SOURCE_KEY.format(repo=record.repo.lower(), source=record.source)
        branch_key = BY_BRANCH_KEY.format(repo=record.repo.lower(), branch=record.branch)
        pipe.set(source_key, record.run_id, ex=RECORD_TTL_S)
        pipe.set(branch_key, record.run_id, ex=RECORD_TTL_S)
        pipe.execute()

    def load(self, run_id: str) -> RunRecord | None:
        raw = self.conn.get(RECORD_KEY.format(run_id=run_id))
        return None if raw is None else RunRecord.model_validate_json(raw)

    def for_source(self, repo: str, source: str) -> RunRecord | None:
        run_id = self.conn.get(BY_SOURCE_KEY.format(repo=repo.lower(), source=source))
        return None if run_id is None else self.load(_text(run_id))

    def for_branch(self, repo: str, branch: str) -> RunRecord | None:
        run_id = self.conn.get(BY_BRANCH_KEY.format(repo=repo.lower(), branch=branch))
        return None if run_id is None else self.load(_text(run_id))

    def delete(self, record: RunRecord) -> None:
        """The record gone, and the lookups by requirement and branch that still name it."""
        pipe = self.conn.pipeline()
        pipe.delete(RECORD_KEY.format(run_id=record.run_id), GONE_KEY.format(run_id=record.run_id))
        for key in (
            BY_SOURCE_KEY.format(repo=record.repo.lower(), source=record.source),
            BY_BRANCH_KEY.format(repo=record.repo.lower(), branch=record.branch),
        ):
            if _text(self.conn.get(key)) == record.run_id:
                pipe.delete(key)
        pipe.execute()

    def of_installation(self, installation_id: int) -> list[RunRecord]:
        """Every record of one installation (a scan of all records: for an uninstall)."""
        found = []
        for key in self.conn.scan_iter(match=RECORD_KEY.format(run_id="*"), count=200):
            raw = self.conn.get(key)
            record = RunRecord.model_validate_json(raw) if raw is not None else None
            if record is not None and record.installation_id == installation_id:
                found.append(record)
        return found

    # liveness -----------------------------------------------------------------------------------

    def beat(self, run_id: str) -> None:
        """The run is alive on this worker; also lists it among the active runs."""
        pipe = self.conn.pipeline()
        pipe.set(HEARTBEAT_KEY.format(run_id=run_id), str(time.time()), ex=self.heartbeat_ttl_s)
        pipe.sadd(ACTIVE_KEY, run_id)
        pipe.execute()

    def alive(self, run_id: str) -> bool:
        return bool(self.conn.exists(HEARTBEAT_KEY.format(run_id=run_id)))

    def ended(self, run_id: str) -> None:
        pipe = self.conn.pipeline()
        pipe.delete(HEARTBEAT_KEY.format(run_id=run_id))
        pipe.srem(ACTIVE_KEY, run_id)
        pipe.execute()

    def active(self) -> list[str]:
        return sorted(m.decode() for m in self.conn.smembers(ACTIVE_KEY))  # type: ignore[union-attr]

    # commands -----------------------------------------------------------------------------------

    def request_cancel(self, run_id: str) -> None:
        self.conn.set(CANCEL_KEY.format(run_id=run_id), "1", ex=CANCEL_TTL_S)

    def cancel_requested(self, run_id: str) -> bool:
        return bool(self.conn.exists(CANCEL_KEY.format(run_id=run_id)))

    def clear_cancel(self, run_id: str) -> None:
        self.conn.delete(CANCEL_KEY.format(run_id=run_id))

    # its pull request or installation gone ----------------------------------------------------

    def mark_gone(self, run_id: str, why: str) -> None:
        self.conn.set(GONE_KEY.format(run_id=run_id), why, ex=RECORD_TTL_S)

    def gone(self, run_id: str) -> str | None:
        value = self.conn.get(GONE_KEY.format(run_id=run_id))
        return None if value is None else _text(value)

    def clear_gone(self, run_id: str) -> None:
        self.conn.delete(GONE_KEY.format(run_id=run_id))


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
