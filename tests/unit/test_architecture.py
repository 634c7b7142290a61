"""The package map in docs/architecture.md is the law: every import stays inside it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAP_ROW_RE = re.compile(r"^\| `(?P<package>(?:bot|worker)[\w.]*)` \|[^|]*\| (?P<imports>[^|]*) \|$")
LIMIT_LINES = 400
LIMIT_CLASS_LINES = 300


def documented_map() -> dict[str, list[str]]:
    """Package → the modules and packages it may import, read from the map's table."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    rules: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = MAP_ROW_RE.match(line)
        if match:
            allowed = re.findall(r"`((?:bot|worker)[\w.]*)`", match["imports"])
            rules[match["package"]] = allowed
    return rules


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_imports(path: Path) -> set[str]:
    """Every module `path` imports, at any depth of the file (lazy imports count)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def imports_of(path: Path) -> set[str]:
    """The project modules `path` imports."""
    return {name for name in all_imports(path) if name.split(".")[0] in {"bot", "worker"}}


def owner(module: str, packages: list[str]) -> str | None:
    """The most specific mapped package holding `module`."""
    holders = [p for p in packages if module == p or module.startswith(p + ".")]
    return max(holders, key=len) if holders else None


def inside(module: str, allowed: list[str]) -> bool:
    return any(module == a or module.startswith(a + ".") for a in allowed)


def source_files() -> list[Path]:
    return sorted(p for d in ("bot", "worker") for p in (ROOT / d).rglob("*.py"))


def test_every_package_of_the_code_is_on_the_map() -> None:
    rules = documented_map()
    packages = {module_name(p.parent / "__init__.py") for p in source_files()}
    modules = {module_name(p) for p in source_files()}
    assert sorted(packages - set(rules)) == []
    # A row names a package, or a module the map places apart (bot.cli above the App).
    assert sorted(set(rules) - packages - modules) == []


def test_every_import_is_one_the_map_allows() -> None:
    rules = documented_map()
    against = []
    for path in source_files():
        here = owner(module_name(path), list(rules))
        assert here is not None, path
        for imported in imports_of(path):
            there = owner(imported, list(rules))
            if there == here or inside(imported, rules[here]):
                continue
            against.append(f"{module_name(path)} imports {imported}")
    assert against == []


def test_the_map_itself_has_no_cycle_between_packages() -> None:
    rules = documented_map()
    graph = {
        p: {owner(a, list(rules)) for a in allowed} - {p, None} for p, allowed in rules.items()
    }
    visiting: set[str] = set()
    done: set[str] = set()

    def walk(package: str, path: list[str]) -> list[str] | None:
        if package in done:
            return None
        if package in visiting:
            return [*path, package]
        visiting.add(package)
        for nxt in sorted(p for p in graph[package] if p is not None):
            cycle = walk(nxt, [*path, package])
            if cycle:
                return cycle
        visiting.discard(package)
        done.add(package)
        return None

    cycles = [c for p in sorted(graph) if (c := walk(p, []))]
    assert cycles == []


def test_the_engine_imports_neither_the_app_nor_redis() -> None:
    offenders = [
        f"{module_name(p)} imports {name}"
        for p in source_files()
        if module_name(p).startswith("worker")
        for name in all_imports(p)
        if name.split(".")[0] in {"bot", "redis", "rq"}
    ]
    assert offenders == []


def test_no_module_is_over_the_size_a_reader_can_hold() -> None:
    long = [
        f"{p.relative_to(ROOT)}: {n} lines"
        for p in source_files()
        if (n := len(p.read_text().splitlines())) > LIMIT_LINES
    ]
    assert long == []


def test_no_class_is_over_the_size_a_reader_can_hold() -> None:
    long = [
        f"{p.relative_to(ROOT)}:{node.name}: {n} lines"
        for p in source_files()
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.ClassDef)
        and (n := (node.end_lineno or node.lineno) - node.lineno + 1) > LIMIT_CLASS_LINES
    ]
    assert long == []
