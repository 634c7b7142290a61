"""docs/ stays true to the code: every setting, repository key and log line is documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from bot.cli import main
from bot.github.auth import CI_PERMISSIONS, REPLY_PERMISSIONS, RUN_PERMISSIONS
from bot.ops.settings import Settings
from worker.model.gates import GateSpec
from worker.model.repo_config import AgentConfig, RepoConfig

ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()


def test_every_environment_variable_of_settings_is_in_the_configuration_reference() -> None:
    # Excluded fields are not variables (process_environment is the environment itself).
    names = [name.upper() for name, field in Settings.model_fields.items() if not field.exclude]
    missing = [name for name in names if f"`{name}`" not in CONFIGURATION]
    assert missing == []


def test_every_repository_key_is_in_the_configuration_reference() -> None:
    # `agent` itself is documented by its keys, agent.runner and so on.
    keys = [field.alias or name for name, field in RepoConfig.model_fields.items()]
    keys.remove("agent")
    keys += [f"agent.{name}" for name in AgentConfig.model_fields]
    missing = [key for key in keys if f"`{key}`" not in CONFIGURATION]
    assert missing == []
    for name in GateSpec.model_fields:  # gate keys, as the gates row names them
        assert re.search(rf"\b{name.removesuffix('_s')}\b", CONFIGURATION), name


def test_the_docs_link_each_other_and_the_readme_links_them() -> None:
    readme = (ROOT / "README.md").read_text()
    for page in ("architecture.md", "configuration.md", "operations.md"):
        assert (ROOT / "docs" / page).exists()
        assert f"docs/{page}" in readme


README = (ROOT / "README.md").read_text()
OPERATIONS = (ROOT / "docs" / "operations.md").read_text()


def _variables() -> list[str]:
    return [name.upper() for name, field in Settings.model_fields.items() if not field.exclude]


def test_every_environment_variable_is_in_the_readmes_table_too() -> None:
    missing = [name for name in _variables() if f"| `{name}` |" not in README]
    assert missing == []


def test_each_variable_has_one_row_in_the_configuration_reference() -> None:
    rows = re.findall(r"^\| `([A-Z_]+)` \|", CONFIGURATION, re.M)
    assert sorted(name for name in set(rows) if rows.count(name) > 1) == []


# A logged message is a constant string (STYLE.md); the first argument of a log call.
LOG_CALL_RE = re.compile(r"\b(?:log|LOG)\.(?:debug|info|warning|error|exception)\(\s*\"([^\"]+)\"")
# A row of operations.md's log tables: | `logger` | LEVEL | `message`, ... | fields | means |
LOG_ROW_RE = re.compile(r"^\| `([\w.]+)` \| [A-Z/]+ \| (.+?) \|", re.M)


def _logged_messages() -> dict[str, set[str]]:
    """Each module's logger name (its __name__) and the constant messages it logs."""
    found: dict[str, set[str]] = {}
    for path in sorted([*ROOT.glob("bot/**/*.py"), *ROOT.glob("worker/**/*.py")]):
        logger = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        messages = set(LOG_CALL_RE.findall(path.read_text()))
        if messages:
            found[logger] = messages
    return found


def test_every_message_the_code_logs_is_in_the_operations_log_tables() -> None:
    documented = _documented_messages()
    missing = [
        f"{logger}: {message}"
        for logger, messages in _logged_messages().items()
        for message in sorted(messages)
        if not any(name == logger and message.startswith(doc) for name, doc in documented)
    ]
    assert missing == []


def test_each_log_line_has_one_row_in_the_operations_page() -> None:
    rows = _documented_messages()
    assert sorted({row for row in rows if rows.count(row) > 1}) == []


def test_every_log_line_the_operations_page_names_is_logged_by_that_logger() -> None:
    logged = _logged_messages()
    wrong = []
    for logger, message in _documented_messages():
        if logger.startswith("rq."):
            continue  # RQ's own lines, checked against RQ below
        if any(m.startswith(message) for m in logged.get(logger, ())):
            continue
        # A message built at run time (bot.worker's startup warnings) is found in the source.
        if logger in logged or message not in _all_sources():
            wrong.append(f"{logger}: {message}")
    assert wrong == []


def test_the_rq_lines_the_operations_page_names_are_rqs() -> None:
    import rq

    rq_source = "".join(p.read_text() for p in Path(rq.__file__).parent.rglob("*.py"))
    rq_messages = [m for logger, m in _documented_messages() if logger.startswith("rq.")]
    assert rq_messages
    # A job's line shows its description (bot/web/enqueue.py), spelled with <placeholders> or an
    # example cut short with …; the rest are RQ's literal words.
    literal = [m for m in rq_messages if "<" not in m and "…" not in m]
    assert [m for m in literal if m not in rq_source] == []


def _documented_messages() -> list[tuple[str, str]]:
    """(logger, message) per message of operations.md's log tables, up to any `...`."""
    pairs = []
    for logger, messages in LOG_ROW_RE.findall(OPERATIONS):
        for message in re.findall(r"`([^`]+)`", messages):
            pairs.append((logger, message.split("...")[0].strip()))
    return pairs


def _all_sources() -> str:
    return "".join(p.read_text() for p in [*ROOT.glob("bot/**/*.py"), *ROOT.glob("worker/**/*.py")])


# The permission GitHub documents for each REST operation reqdrive calls ("Permissions required
# for GitHub Apps"); None: answered for the App's JWT or for anyone. An operation added to
# tests/fixtures/github/operations.txt needs its line here, and app.yml the permission.
OPERATION_PERMISSIONS: dict[str, tuple[str, str] | None] = {
    "POST /app/installations/{installation_id}/access_tokens": None,
    "GET /app": None,
    "GET /repos/{owner}/{repo}/installation": None,
    "GET /rate_limit": None,
    "GET /repos/{owner}/{repo}": ("metadata", "read"),
    "GET /repos/{owner}/{repo}/collaborators/{username}/permission": ("metadata", "read"),
    "GET /repos/{owner}/{repo}/contents/{path}": ("contents", "read"),
    "GET /repos/{owner}/{repo}/compare/{basehead}": ("contents", "read"),
    "GET /repos/{owner}/{repo}/git/ref/{ref}": ("contents", "read"),
    "GET /repos/{owner}/{repo}/commits/{ref}": ("contents", "read"),
    "GET /repos/{owner}/{repo}/branches/{branch}": ("contents", "read"),
    "POST /repos/{owner}/{repo}/commits/{commit_sha}/comments": ("contents", "write"),
    "GET /repos/{owner}/{repo}/issues/{issue_number}": ("issues", "read"),
    "GET /repos/{owner}/{repo}/issues/{issue_number}/comments": ("issues", "read"),
    "POST /repos/{owner}/{repo}/issues/{issue_number}/comments": ("issues", "write"),
    "PATCH /repos/{owner}/{repo}/issues/comments/{comment_id}": ("issues", "write"),
    "POST /repos/{owner}/{repo}/issues/{issue_number}/reactions": ("issues", "write"),
    "POST /repos/{owner}/{repo}/issues/comments/{comment_id}/reactions": ("issues", "write"),
    "POST /repos/{owner}/{repo}/issues/{issue_number}/labels": ("issues", "write"),
    "GET /repos/{owner}/{repo}/pulls": ("pull_requests", "read"),
    "GET /repos/{owner}/{repo}/pulls/{pull_number}": ("pull_requests", "read"),
    "POST /repos/{owner}/{repo}/pulls": ("pull_requests", "write"),
    "PATCH /repos/{owner}/{repo}/pulls/{pull_number}": ("pull_requests", "write"),
    "POST /repos/{owner}/{repo}/check-runs": ("checks", "write"),
    "PATCH /repos/{owner}/{repo}/check-runs/{check_run_id}": ("checks", "write"),
    "GET /repos/{owner}/{repo}/commits/{ref}/check-runs": ("checks", "read"),
    "GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs": ("actions", "read"),
    "GET /repos/{owner}/{repo}/actions/jobs/{job_id}/logs": ("actions", "read"),
    "GET /repos/{owner}/{repo}/check-suites/{check_suite_id}/check-runs": ("checks", "read"),
    "GET /repos/{owner}/{repo}/check-runs/{check_run_id}/annotations": ("checks", "read"),
    "GET /repos/{owner}/{repo}/pulls/{pull_number}/reviews": ("pull_requests", "read"),
    "POST /repos/{owner}/{repo}/pulls/{pull_number}/comments/{comment_id}/replies": (
        "pull_requests",
        "write",
    ),
}
# Beyond REST: draft ↔ ready, review threads read and resolved over GraphQL, and git over
# HTTPS (clone, fetch, push).
OTHER_PERMISSIONS = [("pull_requests", "write"), ("contents", "write")]
LEVELS = ["read", "write"]


def _granted() -> dict[str, str]:
    manifest = yaml.safe_load((ROOT / "app.yml").read_text())
    return dict(manifest["default_permissions"])


def test_the_manifest_grants_every_permission_the_calls_reqdrive_makes_need() -> None:
    listed = [
        line.split("#", 1)[0].strip()
        for line in (ROOT / "tests/fixtures/github/operations.txt").read_text().splitlines()
    ]
    operations = [line for line in listed if line]
    assert sorted(operations) == sorted(OPERATION_PERMISSIONS)
    granted = _granted()
    needed = [p for p in OPERATION_PERMISSIONS.values() if p is not None] + OTHER_PERMISSIONS
    short = [
        (name, level)
        for name, level in needed
        if LEVELS.index(level) > LEVELS.index(granted.get(name, "read")) or name not in granted
    ]
    assert short == []


def test_every_token_a_job_asks_for_is_within_the_manifest() -> None:
    # GitHub refuses (422) a token asking for more than the installation was granted.
    granted = _granted()
    for asked in (RUN_PERMISSIONS, CI_PERMISSIONS, REPLY_PERMISSIONS):
        assert {
            name: level
            for name, level in asked.items()
            if name not in granted or LEVELS.index(level) > LEVELS.index(granted[name])
        } == {}


COMMANDS = [
    "up",
    "serve",
    "worker",
    "replay",
    "init",
    "validate",
    "plan",
    "run",
    "status",
    "logs",
    "runs",
    "discard",
    "doctor",
]


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return capsys.readouterr().out


def test_the_readmes_command_table_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    listed = re.findall(r"^\| `reqdrive ([a-z]+)", README, re.M)
    assert sorted(listed) == sorted(COMMANDS)
    assert all(f"    {command} " in _help(capsys) for command in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_of_a_command_is_in_the_readme(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    options = set(re.findall(r"(--[a-z][a-z-]*)", _help(capsys, command))) - {"--help"}
    assert options  # every command has one, and the help was read
    row = next(line for line in README.splitlines() if line.startswith(f"| `reqdrive {command}"))
    # run and plan share the options their own section lists; the others show theirs in the row.
    where = README if "[run options]" in row else row
    assert sorted(option for option in options if option not in where) == []


def test_the_operations_page_shows_the_procfile_as_it_is() -> None:
    processes = [
        line
        for line in (ROOT / "Procfile").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert processes and all(f"\n{line}\n" in OPERATIONS for line in processes)


def test_the_architecture_page_names_every_module() -> None:
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    modules = [*ROOT.glob("bot/**/*.py"), *ROOT.glob("worker/**/*.py")]
    missing = [
        str(path.relative_to(ROOT))
        for path in modules
        if path.name != "__init__.py" and f"`{path.relative_to(ROOT)}`" not in architecture
    ]
    assert sorted(missing) == []
    assert "`worker/agents/`" in architecture  # the runners, one module each


@pytest.mark.parametrize("page", ["docs/configuration.md", "README.md"])
def test_each_settings_default_is_the_one_the_page_gives(page: str) -> None:
    rows = dict(re.findall(r"^\| `([A-Z_]+)` \| (.*?) \|", (ROOT / page).read_text(), re.M))
    wrong = []
    for name, field in Settings.model_fields.items():
        default = getattr(field.default, "value", field.default)  # an enum's value
        if field.is_required() or default in (None, ""):
            continue  # required, or unset: the pages say so in words
        shown = (
            str(int(default)) if isinstance(default, float) and default.is_integer() else default
        )
        if f"`{shown}`" not in rows[name.upper()]:
            wrong.append(f"{name.upper()}: {shown}")
    assert wrong == []
