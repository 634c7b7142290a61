"""Smart-HTTP git through `git http-backend` (CGI): clone, fetch and push to bare repositories."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def run_backend(
    root: Path, method: str, path_info: str, query: str, headers: dict[str, str], body: bytes
) -> tuple[int, dict[str, str], bytes]:
    """One CGI request to `git http-backend` under `root`: status, headers, body."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_PROJECT_ROOT": str(root),
        "GIT_HTTP_EXPORT_ALL": "1",
        "REQUEST_METHOD": method,
        "PATH_INFO": path_info,
        "QUERY_STRING": query,
        "CONTENT_TYPE": headers.get("content-type", ""),
        "CONTENT_LENGTH": str(len(body)),
        "REMOTE_ADDR": "127.0.0.1",
        # receive-pack is on only for an authenticated user; the caller checked the token.
        "REMOTE_USER": "x-access-token",
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(root),
    }
    if "content-encoding" in headers:
        env["HTTP_CONTENT_ENCODING"] = headers["content-encoding"]
    if "git-protocol" in headers:
        env["GIT_PROTOCOL"] = headers["git-protocol"]
    done = subprocess.run(
        ["git", "http-backend"], input=body, env=env, capture_output=True, check=False, timeout=120
    )
    head, _, rest = done.stdout.partition(b"\r\n\r\n")
    if not _:
        head, _, rest = done.stdout.partition(b"\n\n")
    status, answer = 200, {}
    for line in head.decode("latin-1").splitlines():
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.split()[0])
        elif name:
            answer[name.strip()] = value.strip()
    if done.returncode != 0 and status == 200:
        return 500, {"Content-Type": "text/plain"}, done.stderr
    return status, answer, rest


def git(*args: str, cwd: Path | None = None) -> str:
    """Run git for the double's own bookkeeping; its stdout."""
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout


def refs_of(bare: Path) -> dict[str, str]:
    """Every branch of a bare repository and its head commit."""
    out = git("for-each-ref", "--format=%(refname) %(objectname)", "refs/heads", cwd=bare)
    pairs = (line.split(" ", 1) for line in out.splitlines() if line)
    return {name: sha for name, sha in pairs}
