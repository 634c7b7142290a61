"""No credential anywhere people or the agent can read: on the double, in logs, on disk."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

from tests.support import webhooks
from tests.support.github_double import GitHubDouble


def credentials(double: GitHubDouble) -> list[str]:
    """Every secret of a stack: the tokens the double issued (also as a git Basic credential),
    each line of the App's private key, and the webhook secret."""
    found = [*double.secrets(), webhooks.SECRET]
    for token in double.issued:
        found.append(base64.b64encode(f"x-access-token:{token}".encode()).decode())
    key_lines = double.private_key_pem.strip().splitlines()[1:-1]
    found += [line for line in key_lines if len(line) >= 32]  # the last one may be short
    return found


def visible_on_github(double: GitHubDouble) -> dict[str, str]:
    """What the App wrote that people read: comments, pull requests, check runs (by where)."""
    texts = {f"comment {c['id']}": c["body"] or "" for c in double.comments.values()}
    for (repo, number), pull in double.pulls.items():
        texts[f"pull {repo}#{number}"] = f"{pull.get('title')}\n{pull.get('body') or ''}"
    for number, run in double.check_runs.items():
        texts[f"check run {number}"] = json.dumps(run, default=str)
    for index, comment in enumerate(double.commit_comments):
        texts[f"commit comment {index}"] = json.dumps(comment, default=str)
    for (repo, number), pull in double.pulls.items():
        texts[f"pull {repo}#{number}'s commits"] = _pushed(double, repo, pull["head"]["ref"])
    return texts


def _pushed(double: GitHubDouble, repo: str, branch: str) -> str:
    """A pull request's commits as people read them: messages and every changed file."""
    if not double.bare(repo).is_dir():
        return ""  # a repository the test set up without git
    base = double.repos[repo]["default_branch"]
    span = f"{base}..refs/heads/{branch}"
    done = subprocess.run(
        ["git", "log", "--patch", "--binary", "--format=%B", span],
        cwd=double.bare(repo), capture_output=True, text=True, errors="replace", check=False,
    )  # fmt: skip
    return done.stdout


def files_under(*folders: Path) -> dict[str, bytes]:
    """Every regular file below `folders` (logs, run folders, the work dir), by path."""
    found: dict[str, bytes] = {}
    for folder in folders:
        if not folder.exists():
            continue
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not path.is_symlink():
                found[str(path)] = path.read_bytes()
    return found


def assert_no_secrets(double: GitHubDouble, *folders: Path) -> None:
    """Fail naming where a credential the double knows, the webhook secret or the private key
    appears: in a comment, PR or check run on the double, or in any file under `folders` (the
    stack's logs and work dir)."""
    secrets = credentials(double)
    leaks = [
        where
        for where, text in visible_on_github(double).items()
        if any(secret in text for secret in secrets)
    ]
    encoded = [secret.encode() for secret in secrets]
    leaks += [
        where
        for where, data in files_under(*folders).items()
        if any(secret in data for secret in encoded)
    ]
    assert not leaks, f"a secret appears in: {leaks}"
