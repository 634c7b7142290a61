"""What one Python file imports, read with ast: module names, relative ones placed by the
file's own folder, and those a constant string names to a dynamic import."""

from __future__ import annotations

import ast
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath

# A module name as path parts: `a.b.c` is ("a", "b", "c"); a relative import is made
# absolute from the repository's top (`from .x import y` in src/pkg/m.py: src, pkg, x, y).
ModuleName = tuple[str, ...]

# Calls whose first argument, a constant string, names a module they import: importlib's and
# the builtin's, pytest's importorskip, and the targets mock.patch and monkeypatch import to
# patch ("pkg.mod.attr": the attribute is one part too many, which only selects more).
IMPORTING_CALLS = frozenset(
    {"import_module", "__import__", "importorskip", "patch", "setattr", "delattr"}
)
# mock.patch.dict("pkg.mod.TABLE", ...) and patch.multiple("pkg.mod", ...) import theirs too.
IMPORTING_METHODS = frozenset({("patch", "dict"), ("patch", "multiple")})
# Modules pytest loads as plugins for every test when a conftest names them.
PLUGINS_VARIABLE = "pytest_plugins"
# Only worth a walk of every expression when one of these words is in the file at all.
CALL_WORDS_RE = re.compile(rb"import_module|__import__|importorskip|patch|setattr|delattr")
DOTTED_RE = re.compile(r"(\.*)([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)?")
# Parsed files kept per process, by git blob and path (the path places relative imports): a
# worker's run parses its repository once and each story's changed files again. Bounded, so
# a long-lived process that sees many repositories does not grow without end.
PARSED_MAX = 50_000

_parsed: OrderedDict[tuple[str, str], tuple[ModuleName, ...]] = OrderedDict()


def cached_imports(
    blob: str, path: str, read: Callable[[], tuple[bytes, bool]]
) -> tuple[ModuleName, ...]:
    """imports_of the file at `path` whose git blob is `blob`; `read` gives its bytes and
    whether they are that blob's (a file that differs from git's index is parsed, not kept)."""
    key = (blob, path)
    found = _parsed.get(key)
    if found is not None:
        _parsed.move_to_end(key)
        return found
    source, is_blob = read()
    found = imports_of(path, source)
    if is_blob:
        _parsed[key] = found
        if len(_parsed) > PARSED_MAX:
            _parsed.popitem(last=False)
    return found


def forget_parsed() -> None:
    """Empty the per-process cache (tests, and a process that wants its memory back)."""
    _parsed.clear()


def imports_of(path: str, source: bytes) -> tuple[ModuleName, ...]:
    """Every module the file at `path` imports, in any block and under any condition
    (`if TYPE_CHECKING:` too), sorted; () when it is not Python ast can read. A name built
    at run time is not seen: the whole run at the end catches what that misses."""
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError):  # ValueError: a NUL byte in the source
        return ()
    folder = PurePosixPath(path).parent.parts
    names: set[ModuleName] = set()
    for node in _statements(tree.body):
        if isinstance(node, ast.Import):
            names.update(tuple(alias.name.split(".")) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update(_from_import(node, folder))
        elif isinstance(node, ast.Assign | ast.AnnAssign) and _names_plugins(node):
            names.update(_named(s, folder) for s in _strings(node.value))
    if CALL_WORDS_RE.search(source):
        names.update(_named(s, folder) for s in _call_targets(tree))
    names.discard(())
    return tuple(sorted(names))


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement, nested ones too (in functions, classes, if/try/with/match blocks)."""
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                stack.append(child)
            elif isinstance(child, ast.ExceptHandler | ast.match_case):
                stack.extend(child.body)


def _from_import(node: ast.ImportFrom, folder: tuple[str, ...]) -> Iterator[ModuleName]:
    """`from a.b import c` imports a.b, and a.b.c when c is a submodule: both, to be safe."""
    base = _placed(node.level, node.module or "", folder)
    if base is None:
        return
    yield base
    for alias in node.names:
        if alias.name != "*":
            yield (*base, alias.name)


def _placed(level: int, module: str, folder: tuple[str, ...]) -> ModuleName | None:
    """An import's module as parts from the top; None when its dots climb above the top."""
    parts = tuple(module.split(".")) if module else ()
    if level == 0:
        return parts
    if level - 1 > len(folder):
        return None
    return (*folder[: len(folder) - (level - 1)], *parts)


def _named(text: str, folder: tuple[str, ...]) -> ModuleName:
    """A module named in a string ("pkg.mod", or ".mod" beside the file); () if none."""
    match = DOTTED_RE.fullmatch(text.strip())
    if match is None or not match.group(2):
        return ()
    return _placed(len(match.group(1)), match.group(2), folder) or ()


def _names_plugins(node: ast.Assign | ast.AnnAssign) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return any(isinstance(t, ast.Name) and t.id == PLUGINS_VARIABLE for t in targets)


def _strings(value: ast.expr | None) -> list[str]:
    """The constant strings of `"a"`, `["a", "b"]` or `("a",)`."""
    items = value.elts if isinstance(value, ast.List | ast.Tuple | ast.Set) else [value]
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def _call_targets(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and _imports_by_call(node.func):
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield first.value


def _imports_by_call(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in IMPORTING_CALLS
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in IMPORTING_CALLS:
        return True
    owner = func.value
    owner_name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", None)
    return (owner_name, func.attr) in IMPORTING_METHODS
