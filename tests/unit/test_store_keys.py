"""Every Redis key belongs to one store: its template is written once, in a bot/stores module."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("bot", "worker")
# A key template: "reqdrive:" then a name, as in "reqdrive:run-lock:{repo}:{requirement}".
# Messages ("reqdrive: ...") and hidden markers ("<!-- reqdrive:run ... -->") are not keys.
KEY_RE = re.compile(r"reqdrive:[a-z][a-z-]*")
# The stores the App keeps in Redis, by the prefix of one of their keys.
KNOWN = {
    "reqdrive:checkpoint": "bot/stores/checkpoints.py",
    "reqdrive:run-lock": "bot/stores/run_locks.py",
    "reqdrive:resume-claim": "bot/stores/run_locks.py",
    "reqdrive:run": "bot/stores/runs.py",
    "reqdrive:heartbeat": "bot/stores/runs.py",
    "reqdrive:cancel": "bot/stores/runs.py",
    "reqdrive:gone": "bot/stores/runs.py",
    "reqdrive:delivery": "bot/stores/deliveries.py",
    "reqdrive:rerun": "bot/stores/deliveries.py",
    "reqdrive:writes": "bot/stores/write_budget.py",
    "reqdrive:metrics": "bot/stores/metrics.py",
    "reqdrive:spend": "bot/stores/spend.py",
    "reqdrive:run-slots": "bot/stores/run_slots.py",
}


def key_templates() -> dict[str, list[str]]:
    """Each key prefix in the shipped code, and the modules whose strings start with it."""
    found: dict[str, list[str]] = defaultdict(list)
    for package in SHIPPED:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                text = _leading_text(node)
                match = KEY_RE.match(text) if text is not None else None
                if match:
                    found[match.group()].append(str(path.relative_to(ROOT)))
    return found


def _leading_text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:  # f"reqdrive:x:{id}"
        return _leading_text(node.values[0])
    return None


def test_each_key_is_written_once_in_the_store_that_owns_it() -> None:
    found = key_templates()
    assert {prefix: found.get(prefix) for prefix in KNOWN} == {p: [m] for p, m in KNOWN.items()}
    outside = {p: modules for p, modules in found.items() if len(modules) != 1}
    assert outside == {}, "a key template is written in more than one place"
    not_stores = {p: m for p, [m] in found.items() if not m.startswith("bot/stores/")}
    assert not_stores == {}, "Redis keys belong to the bot/stores module that reads and writes them"


def test_the_engine_reaches_neither_redis_nor_the_app() -> None:
    """Stores, the queue and the run request (bot/requests.py) are the App's: the engine runs
    from a checkout with none of them."""
    importing = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "worker").rglob("*.py"))
        if re.search(r"^\s*(import|from) (redis|rq|bot)\b", path.read_text(), re.MULTILINE)
    ]
    assert importing == []


def test_the_operations_page_names_each_store_key_with_its_store() -> None:
    """docs/operations.md's "Redis keys" table: every key prefix, beside the store owning it."""
    page = (ROOT / "docs/operations.md").read_text()
    table = page.split("### Redis keys", 1)[1].split("\n\n## ", 1)[0]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| `reqdrive:")]
    named = {match.group(): row[1].strip("` ") for row in rows for match in KEY_RE.finditer(row[0])}
    assert {prefix: named.get(prefix) for prefix in KNOWN} == KNOWN
