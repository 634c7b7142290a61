"""What `reqdrive run ARG` names: a requirement file, a requirement id like REQ-001, or the text."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from worker.exceptions import PreflightError
from worker.model.slugs import slugify
from worker.run.spec import Requirement

# An argument that looks like a file name but names no file is a typo, not requirement text.
PATH_LIKE_RE = re.compile(r"^\S+\.(md|txt|markdown)$|^\S*/\S*$", re.IGNORECASE)
# `REQ-001` (or `REQ-001-export`) alone names a requirement file, never requirement text.
REQUIREMENT_ID_RE = re.compile(r"^REQ-\d+(?:-[\w.-]*)?$", re.IGNORECASE)


def requirement_from(argument: str, root: Path) -> Requirement:
    """The requirement `argument` names (a file, `REQ-001`) or is; a typo'd path is an error."""
    path = Path(argument)
    if not path.is_absolute():
        path = Path.cwd() / path
    if "\n" not in argument and path.is_file():
        text = path.read_text(errors="replace")
        resolved = path.resolve()
        in_repo = resolved.is_relative_to(root.resolve())
        repo_path = resolved.relative_to(root.resolve()).as_posix() if in_repo else None
        return Requirement(
            text=text, source=repo_path or path.name, slug=slugify(path.stem), repo_path=repo_path
        )
    named = Path(argument.strip())
    if "\n" not in argument and REQUIREMENT_ID_RE.match(named.name):
        # `REQ-001` anywhere in the checkout; `docs/requirements/REQ-001-x` (no .md) there.
        folder = root if named.parent == Path(".") else path.parent
        return requirement_from(_file_named(named.name, root, folder), root)
    if PATH_LIKE_RE.match(argument.strip()):
        raise PreflightError(f"requirement file {argument} not found")
    if not argument.strip():
        raise PreflightError("the requirement is empty")
    first_line = argument.strip().splitlines()[0]
    return Requirement(text=argument, source="text", slug=slugify(first_line, max_len=40))


def _file_named(name: str, root: Path, folder: Path) -> str:
    """The one requirement file `REQ-001` (or `REQ-001-x`) names under `folder`: `REQ-001.md`
    or `REQ-001-*.md`, never `REQ-0010-*.md`; or an error listing the choice."""
    top = root.resolve()
    candidates = [*folder.rglob(f"{name}.md"), *folder.rglob(f"{name}-*.md")]
    found = sorted(
        {
            p.resolve().relative_to(top).as_posix()
            for p in candidates
            if p.resolve().is_relative_to(top) and not {".reqdrive", ".git"} & set(p.parts)
        }
    )
    if len(found) == 1:
        print(f"reqdrive: {name} is {found[0]}", file=sys.stderr)
        return str(top / found[0])
    if not found:
        raise PreflightError(
            f"no requirement file named {name}*.md in {folder}: give the file's path "
            "(docs/requirements/REQ-001-name.md) or the requirement's text in quotes"
        )
    raise PreflightError(f"{name} could be any of {', '.join(found)}: give the file's path")
