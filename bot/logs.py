"""Logging for the web process, the worker and `up`: JSON lines, or readable lines in a terminal.

Every `extra=` field of a record (delivery_id, job_id, run_id, story_id, ...) is written; inside
an RQ job the job's id and its delivery's id are added to each record that does not carry them.
The format comes from Settings (REQDRIVE_LOG_FORMAT=json|text); unset, a terminal gets text and
anything else JSON. The level is REQDRIVE_LOG_LEVEL (default INFO).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any

from rq import get_current_job

# The attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
# Ids first in text lines, so a reader's eye finds them in the same place.
_ID_FIELDS = ("delivery_id", "job_id", "run_id", "story_id")


class JobContext(logging.Filter):
    """Adds the current RQ job's id and delivery id to records that do not name them."""

    def filter(self, record: logging.LogRecord) -> bool:
        job = get_current_job()
        if job is not None:
            if not hasattr(record, "job_id"):
                record.job_id = job.id
            delivery_id = (job.kwargs or {}).get("delivery_id")
            if delivery_id and not hasattr(record, "delivery_id"):
                record.delivery_id = delivery_id
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and every extra field."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **extras(record),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """`2026-11-22T23:38:20.123Z INFO bot.intake: job queued delivery_id=... job_id=...`."""

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{key}={_text(value)}" for key, value in extras(record).items())
        line = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        line = f"{line} {fields}" if fields else line
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def extras(record: logging.LogRecord) -> dict[str, Any]:
    """The `extra=` fields of a record, the ids first."""
    found = {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}
    ids = {k: found.pop(k) for k in _ID_FIELDS if found.get(k) is not None}
    return {**ids, **found}


def configure_logging(
    log_format: str | None = None, level: str = "INFO", stream: IO[str] | None = None
) -> str:
    """Send every logger's records to `stream` (stderr) in `log_format`; return the format.

    No format: text on a terminal, else JSON. Replaces the root logger's handlers, so calling
    it twice does not double lines.
    """
    stream = stream if stream is not None else sys.stderr
    chosen = log_format or ("text" if stream.isatty() else "json")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter() if chosen == "text" else JsonFormatter())
    handler.addFilter(JobContext())
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return chosen


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _text(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return json.dumps(text) if not text or " " in text or '"' in text else text
