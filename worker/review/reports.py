"""What the reviewers hand over, read as the worker reads prd.json: capped, no link, validated."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from worker.exceptions import PrdError
from worker.model.review import BlindDescription, DiscrepancyReport
from worker.model.validation import problems
from worker.report.run_folder import read_handed_over

DESCRIPTION_FILE = "description.json"
DISCREPANCIES_FILE = "discrepancies.json"
REPORT_MAX_BYTES = 512 * 1024  # a report is a few KiB
PROBLEMS_SHOWN = 5


def read_description(path: Path) -> tuple[BlindDescription | None, str, str]:
    """Agent B's description, its text as written, and why it was refused ("" when valid)."""
    text, problem = _read(path)
    if problem:
        return None, text, problem
    try:
        return BlindDescription.model_validate_json(text), text, ""
    except ValidationError as error:
        return None, text, _described(path.name, error)


def read_discrepancies(path: Path, criteria: int) -> tuple[DiscrepancyReport | None, str, str]:
    """Agent C's report on `criteria` criteria, its text, and why it was refused."""
    text, problem = _read(path)
    if problem:
        return None, text, problem
    try:
        report = DiscrepancyReport.model_validate_json(text)
        report.check_covers(criteria)
    except ValidationError as error:
        return None, text, _described(path.name, error)
    except ValueError as error:
        return None, text, f"{path.name}: {error}"
    return report, text, ""


def _read(path: Path) -> tuple[str, str]:
    if not path.exists():
        return "", f"no {path.name} was written"
    try:
        text = read_handed_over(path, REPORT_MAX_BYTES)
    except PrdError as error:
        return "", str(error)
    try:
        json.loads(text)
    except ValueError as error:
        return text, f"{path.name} is not JSON: {error}"
    return text, ""


def _described(name: str, error: ValidationError) -> str:
    found = problems(error)
    said = [f"{p.path or 'the top'}: {p.reason}" for p in found[:PROBLEMS_SHOWN]]
    more = f" (and {len(found) - PROBLEMS_SHOWN} more)" if len(found) > PROBLEMS_SHOWN else ""
    return f"{name} does not match the format: " + "; ".join(said) + more
