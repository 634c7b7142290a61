"""Logging for the web process, the worker and `up`: JSON lines, or readable lines in a terminal.

Every `extra=` field of a record (delivery_id, job_id, run_id, story_id, ...) is written; inside
an RQ job the job's id and its delivery's id are added to each record that does not carry them.
The format comes from Settings (REQDRIVE_LOG_FORMAT=json|text); unset, a terminal gets text and
anything else JSON. The level is REQDRIVE_LOG_LEVEL (default INFO). Every line passes the
engine's Redactor: credential shapes and the service's own secrets never reach a log.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import IO, Any
from urllib.parse import urlsplit

from rq import get_current_job

from bot.ops.settings import Settings, load_settings
from worker.confine.redact import Redactor
from worker.model.control_chars import has_control

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


class RedactingFormatter(logging.Formatter):
    """A formatter whose whole line, traceback included, passes a Redactor."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self._redactor = redactor

    def format(self, record: logging.LogRecord) -> str:
        return self._redactor.redact(self.line(record))

    def line(self, record: logging.LogRecord) -> str:
        raise NotImplementedError


class JsonFormatter(RedactingFormatter):
    """One JSON object per line: time, level, logger, message and every extra field."""

    def line(self, record: logging.LogRecord) -> str:
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


class TextFormatter(RedactingFormatter):
    """`2026-11-22T23:38:20.123Z INFO bot.web.intake: job queued delivery_id=... job_id=...`."""

    def line(self, record: logging.LogRecord) -> str:
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
    log_format: str | None = None,
    level: str = "INFO",
    stream: IO[str] | None = None,
    *,
    secrets: Iterable[str] = (),
) -> str:
    """Send every logger's records to `stream` (stderr) in `log_format`; return the format.

    No format: text on a terminal, else JSON. `secrets` are hidden from every line, besides
    the credential shapes the Redactor knows. Replaces the root logger's handlers, so calling
    it twice does not double lines.
    """
    stream = stream if stream is not None else sys.stderr
    chosen = log_format or ("text" if stream.isatty() else "json")
    redactor = Redactor(secrets)
    handler = logging.StreamHandler(stream)
    formatter = TextFormatter(redactor) if chosen == "text" else JsonFormatter(redactor)
    handler.setFormatter(formatter)
    handler.addFilter(JobContext())
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return chosen


def configure_from(settings: Settings, stream: IO[str] | None = None) -> str:
    """configure_logging with the settings' format and level, hiding the settings' secrets."""
    return configure_logging(
        settings.reqdrive_log_format,
        settings.reqdrive_log_level,
        stream,
        secrets=service_secrets(settings),
    )


def server_formatter() -> logging.Formatter:
    """The web server's own lines (granian's `--log-config`) in the same format as ours."""
    settings = load_settings()
    redactor = Redactor(service_secrets(settings))
    chosen = settings.reqdrive_log_format or ("text" if sys.stderr.isatty() else "json")
    return TextFormatter(redactor) if chosen == "text" else JsonFormatter(redactor)


def service_secrets(settings: Settings) -> list[str]:
    """The secret values the service holds: webhook secret, App key, Redis password."""
    found = [settings.github_webhook_secret.get_secret_value()]
    if settings.github_private_key is not None:
        found.append(settings.github_private_key.get_secret_value())
    if settings.redis_url:
        password = urlsplit(settings.redis_url).password
        if password:
            found.append(password)
    return found


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _text(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    # A field may hold what an agent chose (a refused egress target): quoted, its control
    # characters are escaped (json.dumps escapes C0, and C1 as non-ASCII).
    quote = not text or " " in text or '"' in text or has_control(text)
    return json.dumps(text) if quote else text
