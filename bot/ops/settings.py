"""Service settings, read once from the environment and validated."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from bot.exceptions import ConfigurationError
from worker.confine.bytecode_seed import check_private
from worker.confine.limits import DEFAULT_LIMITS, LIMIT_VARIABLES, ResourceLimits
from worker.confine.sandbox import SandboxMode, SandboxNetwork, api_hosts
from worker.model.validation import problems

# Which variable a user must set, by settings field, for error messages.
ENV_NAMES = {
    "github_webhook_secret": "GITHUB_WEBHOOK_SECRET",
    "github_app_id": "GITHUB_APP_ID",
    "github_private_key": "GITHUB_PRIVATE_KEY",
    "github_private_key_path": "GITHUB_PRIVATE_KEY_PATH",
    "redis_url": "REDIS_URL",
    "github_api_url": "GITHUB_API_URL",
}


# The schemes redis-py's from_url understands.
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")

# What each required variable is, for the message that asks for it.
FIELD_HELP = {
    "github_webhook_secret": "the webhook secret you gave GitHub when registering the App",
}


class InstallationOverride(BaseModel):
    """One installation's entry in REQDRIVE_INSTALLATIONS: what it sets replaces the default."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    # None written out (`null`): no monthly cap for this installation whatever the default.
    monthly_budget_usd: float | None = Field(default=None, gt=0, alias="monthlyBudgetUsd")
    max_concurrent_runs: int | None = Field(default=None, ge=1, alias="maxConcurrentRuns")


class InstallationLimits(BaseModel):
    """What one installation may spend and run at once, as the operator set it."""

    model_config = ConfigDict(frozen=True)

    monthly_budget_usd: float | None  # None: no cap
    max_concurrent_runs: int
    source: str  # where the budget came from, for the sentence that names it


class Settings(BaseSettings):
    """Everything the web and worker processes read from the environment."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    github_webhook_secret: SecretStr = Field(min_length=1)
    github_app_id: int | None = None
    github_private_key: SecretStr | None = None
    github_private_key_path: Path | None = None
    redis_url: str | None = None
    github_api_url: str = "https://api.github.com"

    reqdrive_work_dir: Path = Path(".reqdrive")
    reqdrive_agent: str = "claude"
    reqdrive_agent_command: str | None = None
    reqdrive_gate_path: str | None = None  # PATH the checks run with (the operator's python)
    # The worker's bytecode of library modules for the checks; unset: the work dir's.
    reqdrive_bytecode_seed: Path | None = None
    reqdrive_trigger_label: str = "reqdrive"
    # The App's slug: pushes by "<slug>[bot]" never trigger runs. Unset: no bot push triggers.
    reqdrive_app_slug: str | None = None
    reqdrive_job_timeout_hours: float = Field(default=6.0, gt=0)
    reqdrive_queue: str = "reqdrive"
    # The web process: bytes of not-yet-verified bodies one server worker holds at once (more
    # are refused 503), and how long a body may take to arrive (then 408).
    reqdrive_body_budget_mib: int = Field(default=64, ge=26)
    reqdrive_body_deadline_s: float = Field(default=10.0, gt=0)
    # Logs (bot/ops/logs.py): JSON lines, or readable text; unset, text on a terminal, else JSON.
    reqdrive_log_format: Literal["json", "text"] | None = None

    reqdrive_log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # Every agent call and gate runs in a bubblewrap sandbox; "off" runs them unconfined (the
    # worker says so loudly). Extra read-only toolchain folders, separated like PATH.
    reqdrive_sandbox: SandboxMode = SandboxMode.ON
    reqdrive_sandbox_readonly: str = ""
    # "api": an agent call reaches only its model's API (through the egress proxy), a check
    # nothing; more host:port endpoints an agent call may reach, separated by commas.
    reqdrive_sandbox_network: SandboxNetwork = SandboxNetwork.OPEN
    reqdrive_sandbox_api_hosts: str = ""
    # Bounds on every call and run (worker/confine/limits.py; docs/sandbox.md, "Limits").
    reqdrive_limit_pids: int = Field(default=DEFAULT_LIMITS.pids, gt=0)
    reqdrive_limit_memory_mib: int = Field(default=DEFAULT_LIMITS.memory_mib, gt=0)
    reqdrive_limit_file_mib: int = Field(default=DEFAULT_LIMITS.file_mib, gt=0)
    reqdrive_disk_free_mib: int = Field(default=DEFAULT_LIMITS.disk_free_mib, gt=0)
    reqdrive_disk_quota_mib: int = Field(default=DEFAULT_LIMITS.disk_quota_mib, gt=0)
    reqdrive_report_max_mib: int = Field(default=DEFAULT_LIMITS.report_mib, gt=0)
    reqdrive_report_max_cases: int = Field(default=DEFAULT_LIMITS.report_cases, gt=0)
    reqdrive_scan_deadline_s: float = Field(default=DEFAULT_LIMITS.scan_deadline_s, gt=0)
    # The GitHub client (bot/github/client.py): per-call timeout, and PyGithub's pacing of requests.
    reqdrive_github_timeout_s: float = Field(default=15.0, gt=0)
    reqdrive_github_request_interval_s: float = Field(default=0.25, ge=0)
    reqdrive_github_write_interval_s: float = Field(default=1.0, ge=0)
    # Content writes per installation per minute, across all workers (GitHub's limit is 80).
    reqdrive_github_writes_per_minute: int = Field(default=79, ge=1, le=80)
    # Recovery (bot/jobs/recovery.py): a run whose heartbeat is this old lost its worker; every
    # worker looks for such runs this often. Lost runs resume within about their sum.
    reqdrive_heartbeat_ttl_s: int = Field(default=45, ge=3)
    reqdrive_recovery_sweep_s: float = Field(default=30.0, gt=0)
    # Per installation, set by the operator (a repository's config cannot raise them): the
    # agents' spend per calendar month (UTC), counted in Redis across workers (unset: no cap),
    # and how many runs may hold a worker at once; more wait in the queue. These two are every
    # installation's default; REQDRIVE_INSTALLATIONS (JSON, by installation id) overrides
    # them for some: {"123": {"monthlyBudgetUsd": 50, "maxConcurrentRuns": 1}}.
    reqdrive_monthly_budget_usd: float | None = Field(default=None, gt=0)
    reqdrive_max_concurrent_runs: int = Field(default=2, ge=1)
    reqdrive_installations: dict[int, InstallationOverride] = Field(default={})

    @field_validator("reqdrive_log_format", mode="before")
    @classmethod
    def _format_any_case(cls, value: object) -> object:
        return (value.strip().lower() or None) if isinstance(value, str) else value

    @field_validator("reqdrive_bytecode_seed")
    @classmethod
    def _seed_is_own(cls, value: Path | None) -> Path | None:
        if value is not None:
            check_private(value, whole=True)  # UnsafeSeed is a ValueError: said as its error
        return value

    @field_validator("reqdrive_log_level", mode="before")
    @classmethod
    def _level_any_case(cls, value: object) -> object:
        return (value.strip().upper() or "INFO") if isinstance(value, str) else value

    @field_validator("reqdrive_sandbox_network", mode="before")
    @classmethod
    def _network_any_case(cls, value: object) -> object:
        return (value.strip().lower() or "open") if isinstance(value, str) else value

    @field_validator("reqdrive_sandbox_api_hosts")
    @classmethod
    def _api_hosts_are_endpoints(cls, value: str) -> str:
        api_hosts(value)  # ValueError names the entry that is not host:port
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url_has_a_scheme(cls, value: str | None) -> str | None:
        # Checked here, once, instead of redis-py's ValueError traceback in every process.
        # The value is not repeated: it may hold a password.
        if not value:
            return None  # REDIS_URL= in a .env: unset
        if not value.startswith(REDIS_SCHEMES):
            raise ValueError(
                "must start with redis://, rediss:// or unix:// (for example "
                "redis://127.0.0.1:6379/0); unset it to use the default"
            )
        return value

    @model_validator(mode="after")
    def _private_key_sources_exclusive(self) -> Self:
        if self.github_private_key is not None and self.github_private_key_path is not None:
            raise ValueError("set GITHUB_PRIVATE_KEY or GITHUB_PRIVATE_KEY_PATH, not both")
        return self

    def installation_limits(self, installation_id: int) -> InstallationLimits:
        """The installation's monthlyBudgetUsd and maxConcurrentRuns: its own entry in
        REQDRIVE_INSTALLATIONS where it sets one, else the defaults."""
        return limits_of(
            installation_id,
            self.reqdrive_installations,
            self.reqdrive_monthly_budget_usd,
            self.reqdrive_max_concurrent_runs,
        )

    @property
    def job_timeout_s(self) -> int:
        """RQ's time limit of every job, in whole seconds (rounded up), wherever it is queued."""
        return math.ceil(self.reqdrive_job_timeout_hours * 3600)

    def limits(self) -> ResourceLimits:
        """The engine's resource limits, as these settings set them."""
        return ResourceLimits(**{k: getattr(self, v.lower()) for k, v in LIMIT_VARIABLES.items()})

    def private_key_pem(self) -> str | None:
        """The App's private key as PEM text, from the variable or the file it names."""
        if self.github_private_key is not None:
            return self.github_private_key.get_secret_value()
        if self.github_private_key_path is not None:
            return self.github_private_key_path.read_text()
        return None


def limits_of(
    installation_id: int,
    overrides: Mapping[int, InstallationOverride],
    monthly_budget_usd: float | None,
    max_concurrent_runs: int,
) -> InstallationLimits:
    own = overrides.get(installation_id)
    budget, source = monthly_budget_usd, "REQDRIVE_MONTHLY_BUDGET_USD"
    if own is not None and "monthly_budget_usd" in own.model_fields_set:
        budget = own.monthly_budget_usd
        source = f"monthlyBudgetUsd of installation {installation_id} in REQDRIVE_INSTALLATIONS"
    runs = own.max_concurrent_runs if own is not None else None
    return InstallationLimits(
        monthly_budget_usd=budget,
        max_concurrent_runs=runs if runs is not None else max_concurrent_runs,
        source=source,
    )


def installations_from(text: str | None) -> dict[int, InstallationOverride]:
    """REQDRIVE_INSTALLATIONS as `reqdrive status` reads it (it loads no Settings); {} when
    unset or not valid (the worker refuses to start with it)."""
    try:
        return _INSTALLATIONS.validate_json(text) if text else {}
    except ValidationError:
        return {}


_INSTALLATIONS = TypeAdapter(dict[int, InstallationOverride])


def load_settings(**overrides: object) -> Settings:
    """Read the environment once; turn validation errors into one actionable message."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ConfigurationError(_describe(exc)) from None
    except SettingsError as exc:  # a JSON variable that is not JSON
        field = str(exc).split('"')[1] if '"' in str(exc) else ""
        name = field.upper() or "a variable"
        raise ConfigurationError(
            f"reqdrive is not configured:\n  {name}: not valid JSON (for example "
            '{"123": {"monthlyBudgetUsd": 50, "maxConcurrentRuns": 1}})'
        ) from None


def _describe(exc: ValidationError) -> str:
    lines = ["reqdrive is not configured:"]
    for problem in problems(exc):
        field = problem.field
        name = ENV_NAMES.get(field, field.upper())
        if problem.kind == "missing" or field in FIELD_HELP:
            lines.append(f"  set {name}: {FIELD_HELP.get(field, 'required')}")
        elif field == "reqdrive_installations":  # where in the JSON: "7.monthlyBudget"
            where = problem.path.removeprefix(field).lstrip(".") or "the whole value"
            lines.append(f"  {name}: {where}: {problem.reason}")
        elif name:
            lines.append(f"  {name}: {problem.reason}")
        else:
            lines.append(f"  {problem.reason}")
    return "\n".join(lines)
