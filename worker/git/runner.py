"""The one git runner: argument lists, a working folder, a timeout, credentials per command,
failures as a redacted GitError."""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from worker.confine.redact import REDACTED, Redactor
from worker.exceptions import GitError

COMMITTER_NAME = "reqdrive"
COMMITTER_EMAIL = "reqdrive@users.noreply.github.com"
DEFAULT_TIMEOUT_S = 600.0

# Git is given only what it needs from the worker's environment: the worker holds the App's
# private key and the Redis URL, and any command git runs on a repository's behalf would see them.
ENV_ALLOWLIST = frozenset(
    {"PATH", "HOME", "LANG", "TMPDIR", "SSH_AUTH_SOCK", "SSL_CERT_FILE", "SSL_CERT_DIR"}
)
ENV_ALLOWED_PREFIXES = ("GIT_", "LC_")
PROXY_VARIABLES = frozenset({"http_proxy", "https_proxy", "no_proxy", "all_proxy"})
# Our own GIT_CONFIG_* pairs are appended to any the caller already set; never inherit these.
CONFIG_ENV_RE = re.compile(r"^GIT_CONFIG_(COUNT|KEY_\d+|VALUE_\d+|PARAMETERS)$")

# Config given on every one of reqdrive's own git commands, above any file: an agent that got
# at a config file (the mirror's, unsandboxed) or left a .gitattributes naming a filter, a
# hook or a signing program must not run code in the worker's git, nor change its identity.
# Command-line config cannot remove an `include.path` or a `filter.<x>.clean` from a file, so
# the files themselves are only ones reqdrive wrote: no system config, an empty global one,
# and the mirror's config rewritten (mirror.write_mirror_config).
PROTECTIVE_CONFIG = (
    ("core.hooksPath", os.devnull),
    ("core.fsmonitor", "false"),
    ("core.attributesFile", os.devnull),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("push.gpgSign", "false"),
    ("user.name", COMMITTER_NAME),
    ("user.email", COMMITTER_EMAIL),
)
# Variables that would point the worker's git at another repository, index or object store.
REPOSITORY_VARIABLES = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_COMMON_DIR",
        "GIT_NAMESPACE",
        "GIT_CEILING_DIRECTORIES",
        "GIT_CONFIG",
        "GIT_CONFIG_SYSTEM",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_NOSYSTEM",
        "GIT_ATTR_SOURCE",
    }
)


@dataclass(frozen=True)
class GitCredentials:
    """An installation token, given to git per command and never stored."""

    token: str
    username: str = "x-access-token"

    def __repr__(self) -> str:  # dataclass repr would print the token into logs and tracebacks
        return f"GitCredentials(username={self.username!r}, token={REDACTED!r})"

    def basic_auth(self) -> str:
        raw = f"{self.username}:{self.token}".encode()
        return base64.b64encode(raw).decode("ascii")

    def secrets(self) -> tuple[str, ...]:
        return (self.token, self.basic_auth())


# Asked before every fetch and push: an installation token lasts an hour, a run may take six.
CredentialsProvider = Callable[[], GitCredentials]


@dataclass(frozen=True)
class _Checkout:
    git_dir: Path
    environment: Mapping[str, str]  # what git run there inherits (allowlisted already)


# Checkouts whose git folder the worker knows from its own records: run_git names that folder
# and the work tree explicitly for any command run in them, so a `.git` file the agent
# rewrote (pointing at another repository, or at the user's own checkout) is never read.
# Each keeps the environment its cache was given, so the run's commands there (reset, diff,
# commit, from any module) inherit what the caller allowed without each carrying it.
_TRUSTED_CHECKOUTS: dict[Path, _Checkout] = {}


def trust_worktree(path: Path, git_dir: Path, environment: Mapping[str, str]) -> None:
    """Run every later git command in `path` against `git_dir`, whatever `path/.git` says,
    inheriting the allowlisted part of `environment`."""
    _TRUSTED_CHECKOUTS[path.absolute()] = _Checkout(git_dir, git_environment(environment))


def forget_worktree(path: Path) -> None:
    _TRUSTED_CHECKOUTS.pop(path.absolute(), None)


def trusted_git_dir(path: Path) -> Path | None:
    """The git folder every command in `path` runs against, when the worker trusts `path`."""
    checkout = _TRUSTED_CHECKOUTS.get(path.absolute())
    return None if checkout is None else checkout.git_dir


def git_environment(source: Mapping[str, str]) -> dict[str, str]:
    """What git may inherit of `source` (the worker's environment, as its caller captured it)."""
    return {k: v for k, v in source.items() if _inherited(k)}


def run_git(
    args: Sequence[str],
    *,
    cwd: Path,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    credentials: GitCredentials | None = None,
    env: Mapping[str, str] | None = None,
    environment: Mapping[str, str] | None = None,
    check: bool = True,
) -> str:
    """Run one git command and return its stdout without the trailing newline.

    Git inherits the allowlisted part of `environment`: by default the one given with the
    trusted checkout at `cwd` (RepositoryCache), elsewhere none. `env` adds variables to it.
    On a non-zero exit (with `check`) or a timeout, raises GitError carrying the command and
    stderr, with credentials redacted.
    """
    checkout = _TRUSTED_CHECKOUTS.get(Path(cwd).absolute())
    if checkout is not None:
        args = [f"--git-dir={checkout.git_dir}", f"--work-tree={Path(cwd).absolute()}", *args]
    if environment is None:
        environment = checkout.environment if checkout is not None else {}
    try:
        proc = _start_git(args, cwd, _git_env(environment, credentials, env))
    except OSError as error:  # no git on PATH, or cwd is gone
        raise _git_error(args, 127, f"could not start git: {error}", credentials) from error
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        out, err = _kill(proc)
        stderr = f"timed out after {timeout_s:g}s\n{_decode(err)}"
        raise _git_error(args, None, stderr, credentials) from None
    if check and proc.returncode != 0:
        raise _git_error(args, proc.returncode, _decode(err), credentials)
    return out.decode("utf-8", errors="surrogateescape").rstrip("\n")


def _start_git(args: Sequence[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["git", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # Its own process group, so a timeout also stops git's helpers (remote-https, index-pack).
        start_new_session=True,
    )


def _kill(proc: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    with suppress(ProcessLookupError):  # it may have exited right at the deadline
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.communicate()


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _git_error(
    args: Sequence[str], code: int | None, stderr: str, credentials: GitCredentials | None
) -> GitError:
    """The error for a failed command, with the token and token-shaped text hidden."""
    redactor = Redactor(credentials.secrets() if credentials else ())
    return GitError([redactor.redact(arg) for arg in args], code, redactor.redact(stderr))


def _git_env(
    environment: Mapping[str, str],
    credentials: GitCredentials | None,
    extra: Mapping[str, str] | None,
) -> dict[str, str]:
    env = git_environment(environment)
    env.update(extra or {})
    # No config file but the repository's own (which reqdrive writes): the system and global
    # ones may name hooks, filters, includes or URL rewrites nobody reviewed for this.
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_CONFIG_GLOBAL"] = os.devnull
    # A missing or wrong credential must fail at once, not wait for someone to type a password.
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["LC_ALL"] = "C"  # stable English messages, which corruption detection reads
    pairs = list(PROTECTIVE_CONFIG)
    if credentials is not None:
        # An empty value first clears any extraHeader the repository's config carries.
        pairs += [("http.extraHeader", ""), ("http.extraHeader", _auth_header(credentials))]
    return _with_config(env, pairs)


def _inherited(name: str) -> bool:
    if CONFIG_ENV_RE.match(name) or name in REPOSITORY_VARIABLES:
        return False
    return (
        name in ENV_ALLOWLIST
        or name.lower() in PROXY_VARIABLES
        or name.startswith(ENV_ALLOWED_PREFIXES)
    )


def _auth_header(credentials: GitCredentials) -> str:
    return f"Authorization: Basic {credentials.basic_auth()}"


def _with_config(env: dict[str, str], pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Add config through GIT_CONFIG_COUNT/KEY/VALUE: per process, never on disk or in argv."""
    start = int(env.get("GIT_CONFIG_COUNT", "0") or "0")
    for offset, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{start + offset}"] = key
        env[f"GIT_CONFIG_VALUE_{start + offset}"] = value
    env["GIT_CONFIG_COUNT"] = str(start + len(pairs))
    return env


def head_sha(cwd: Path) -> str:
    """The commit checked out in `cwd`."""
    return run_git(["rev-parse", "--verify", "HEAD^{commit}"], cwd=cwd)


@dataclass(frozen=True)
class Git:
    """run_git with the environment and timeout one repository cache gives all its commands."""

    environment: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __call__(
        self,
        args: Sequence[str],
        cwd: Path,
        credentials: GitCredentials | None = None,
        *,
        check: bool = True,
    ) -> str:
        return run_git(
            args,
            cwd=cwd,
            timeout_s=self.timeout_s,
            credentials=credentials,
            environment=self.environment,
            check=check,
        )
