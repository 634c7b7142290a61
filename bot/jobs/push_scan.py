"""Which requirement files a push changed, asked of GitHub when its payload cannot say."""

from __future__ import annotations

from bot.github.client import RepoClient
from bot.web.triggers import REQUIREMENT_PATH_RE

REQUIREMENTS_FOLDER = "docs/requirements"  # the folder REQUIREMENT_PATH_RE accepts
NO_COMMIT = "0" * 40  # a push's `before` when it created the branch


def changed_requirement_files(client: RepoClient, base: str | None, head: str) -> list[str]:
    """Requirement paths that exist at `head` and differ from `base`, sorted.

    The compare API first; when it reaches its file cap, the requirements folder listed at
    both commits and compared by blob sha (the folder holds far fewer files than a push may).
    """
    files = client.changed_files(base, head) if base and base != NO_COMMIT else None
    if files is not None:
        return sorted(
            path for path, status in files
            if status != "removed" and REQUIREMENT_PATH_RE.match(path)
        )  # fmt: skip
    before = client.folder_shas(REQUIREMENTS_FOLDER, base) if base and base != NO_COMMIT else {}
    after = client.folder_shas(REQUIREMENTS_FOLDER, head)
    return sorted(
        path for path, sha in after.items()
        if REQUIREMENT_PATH_RE.match(path) and before.get(path) != sha
    )  # fmt: skip
