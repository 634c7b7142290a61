"""The blind review's reports (agent B's description, agent C's findings) and the run's record."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

TEXT_CHARS = 4000  # one field of a report; a description is prose, not a copy of the code
LIST_ITEMS = 60  # behaviours, findings, extra behaviour

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=TEXT_CHARS)]


class ReviewMode(StrEnum):
    """`review` in .github/reqdrive.yml."""

    TRIANGULAR = "triangular"  # agent B describes the change blind, agent C compares
    OFF = "off"


class CriterionStatus(StrEnum):
    """Agent C's word on one acceptance criterion."""

    MET = "met"
    NOT_MET = "not met"
    NOT_SHOWN = "not shown"  # the description neither shows it done nor undone


class BlindDescription(BaseModel):
    """Agent B's `description.json`: what the change does, told without the requirement."""

    model_config = ConfigDict(extra="forbid", strict=True)

    summary: Text
    behaviours: list[Text] = Field(min_length=1, max_length=LIST_ITEMS)


class CriterionFinding(BaseModel):
    """One criterion as agent C judged it, with the evidence from B's description."""

    model_config = ConfigDict(extra="forbid", strict=True)

    criterion: int = Field(ge=1)  # its number in the prompt's list, 1 first
    status: CriterionStatus = Field(strict=False)  # JSON gives the string
    evidence: Text


class DiscrepancyReport(BaseModel):
    """Agent C's `discrepancies.json`: each criterion met, not met or not shown, and what the
    change does that no criterion asked for."""

    model_config = ConfigDict(extra="forbid", strict=True)

    criteria: list[CriterionFinding] = Field(max_length=LIST_ITEMS)
    extra_behaviour: list[Text] = Field(default_factory=list, max_length=LIST_ITEMS)

    @model_validator(mode="after")
    def _each_criterion_once(self) -> DiscrepancyReport:
        numbers = [f.criterion for f in self.criteria]
        twice = sorted({n for n in numbers if numbers.count(n) > 1})
        if twice:
            raise ValueError(f"criterion {', '.join(map(str, twice))} judged more than once")
        return self

    def check_covers(self, count: int) -> None:
        """Every one of the `count` criteria judged, and no other (ValueError names them)."""
        numbers = {f.criterion for f in self.criteria}
        missing = sorted(set(range(1, count + 1)) - numbers)
        unknown = sorted(numbers - set(range(1, count + 1)))
        if missing:
            raise ValueError(f"criterion {', '.join(map(str, missing))} not judged")
        if unknown:
            raise ValueError(f"there is no criterion {', '.join(map(str, unknown))}")


class ReviewOutcome(StrEnum):
    """What one review came to, as the worker reads the reports."""

    CLEAN = "criteria met"  # every criterion met (extra behaviour is listed, not refused)
    UNMET = "criteria not met"  # C found a criterion not met or not shown
    INCOMPLETE = "review incomplete"  # no valid report after a retry, or the agent failed
    REFUSED = "review refused"  # the blind prompt would have held the requirement


class ReviewFinding(BaseModel):
    """A criterion with C's status and evidence, kept in the record by its text."""

    criterion: str
    status: CriterionStatus
    evidence: str = ""


class ReviewRecord(BaseModel):
    """One blind review as the run keeps it: the findings, what it cost, where its reports are.
    A model's opinion of the change: the tests remain the worker's proof."""

    outcome: ReviewOutcome
    findings: list[ReviewFinding] = Field(default_factory=list)
    extra_behaviour: list[str] = Field(default_factory=list)
    summary: str = ""  # B's summary of the change
    problem: str = ""  # why the review is incomplete or refused
    reports: list[str] = Field(default_factory=list)  # file names in the run folder
    calls: int = 0  # agent calls the review made (B and C, retries included)
    cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    duration_s: float = 0.0

    @property
    def unmet(self) -> list[ReviewFinding]:
        return [f for f in self.findings if f.status is not CriterionStatus.MET]

    @property
    def met_count(self) -> int:
        return sum(1 for f in self.findings if f.status is CriterionStatus.MET)

    def headline(self) -> str:
        """ "3 of 3 criteria met", "2 of 3 criteria met; 1 extra behaviour", "review
        incomplete: ...": one line, for tables and checklists."""
        if self.outcome in (ReviewOutcome.INCOMPLETE, ReviewOutcome.REFUSED):
            return f"{self.outcome}: {self.problem}" if self.problem else str(self.outcome)
        line = f"{self.met_count} of {len(self.findings)} criteria met"
        if self.extra_behaviour:
            n = len(self.extra_behaviour)
            line += f"; {n} extra behaviour{'s' * (n != 1)}"
        return line

    def finding_lines(self) -> list[str]:
        """Each unmet criterion with C's evidence: what the implementer and the PR's reader
        are told."""
        return [f"{f.criterion} — {f.status}: {f.evidence}" for f in self.unmet]
