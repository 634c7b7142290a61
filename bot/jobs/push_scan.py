"""Which requirement files a push changed, asked of GitHub when intake could not tell."""

from __future__ import annotations

from bot.github.client import RepoClient
from worker.model.requirement_files import is_requirement_file, requirements_folder

NO_COMMIT = "0" * 40  # a push's `before` when it created the branch


def changed_requirement_files(
    client: RepoClient, base: str | None, head: str, requirements_dir: str
) -> list[str]:
    """Requirement files (in `requirements_dir`) that exist at `head` and differ from `base`,
    sorted.

    The compare API first; when it reaches its file cap, the requirements folder listed at
    both commits and compared by blob sha (the folder holds far fewer files than a push may).
    """
    since = base if base and base != NO_COMMIT else None
    files = client.changed_files(since, head) if since else None
    if files is not None:
        kept = [path for path, status in files if status != "removed"]
        return sorted(p for p in kept if is_requirement_file(p, requirements_dir))
    folder = requirements_folder(requirements_dir)
    before = client.folder_shas(folder, since) if since else {}
    after = client.folder_shas(folder, head)
    changed = [path for path, sha in after.items() if before.get(path) != sha]
    return sorted(p for p in changed if is_requirement_file(p, requirements_dir))
