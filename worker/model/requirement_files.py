"""What a requirement file is: a `REQ-*.md` directly in the repository's requirementsDir.

The one rule for every place that asks: the push trigger, the push scan, the run's check of
a pushed path, `reqdrive validate` and `reqdrive init`. Paths are relative to the repository,
with forward slashes, as git and GitHub's payloads write them.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

DEFAULT_REQUIREMENTS_DIR = "docs/requirements"
REQUIREMENT_NAME_RE = re.compile(r"\AREQ-[^/]+\.md\Z")
REQUIREMENT_NAMES = "REQ-*.md"  # how messages and docs write the name rule


def is_requirement_name(path: str) -> bool:
    """Whether the file's name, in whatever folder, is a requirement's (`REQ-001-export.md`)."""
    return REQUIREMENT_NAME_RE.match(PurePosixPath(path).name) is not None


def is_requirement_file(path: str, requirements_dir: str) -> bool:
    """Whether `path` is a requirement where the requirementsDir is `requirements_dir`: a
    requirement's name directly in that folder (a subfolder holds drafts or archives)."""
    return is_requirement_name(path) and PurePosixPath(path).parent == PurePosixPath(
        requirements_dir
    )


def requirements_folder(requirements_dir: str) -> str:
    """The folder as GitHub's contents API names it: `docs/requirements`, or "" for the top."""
    folder = PurePosixPath(requirements_dir).as_posix()
    return "" if folder == "." else folder
