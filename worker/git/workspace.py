"""Repository cache, per-run worktrees, and the one git runner."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import logging
import os
import re
import shutil
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

from worker.confine.redact import REDACTED, Redactor
from worker.exceptions import GitError, WorkspaceError
from worker.model.run_ids import check_run_id

log = logging.getLogger(__name__)

BRANCH_REFSPEC = "+refs/heads/*:refs/remotes/origin/*"
TAG_REFSPEC = "+refs/tags/*:refs/tags/*"
# Per-worktree ref (refs/worktree/* is private to one worktree): the remote head this run last
# saw or pushed. The shared refs/remotes/origin/* cannot be the lease: another run's fetch
# would move it to a human's push, and force-with-lease would then overwrite that push.
LEASE_REF = "refs/worktree/reqdrive-lease"
COMMITTER_NAME = "reqdrive"
COMMITTER_EMAIL = "reqdrive@users.noreply.github.com"
DEFAULT_TIMEOUT_S = 600.0
# Finished runs' checkouts kept per mirror for the next run: checking out a new commit in an
# existing worktree rewrites only the files that differ, where a new worktree writes them all.
DEFAULT_SPARES_PER_MIRROR = 2

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
# and the mirror's config rewritten (_write_config).
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

MIRROR_NAME_RE = re.compile(r"[^A-Za-z0-9._-]+")
SYMREF_RE = re.compile(r"^ref: refs/heads/(\S+)\tHEAD$", re.MULTILINE)
# Messages git prints when the local object store, not the network, is broken.
CORRUPTION_RE = re.compile(
    r"corrupt|bad object|missing (blob|tree|commit)|unable to read|not a git repository"
    r"|did not send all necessary objects|fatal: bad (config|tree)",
    re.IGNORECASE,
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
class Worktree:
    """A run's checkout: its own folder on its own branch, sharing the mirror's objects."""

    path: Path
    branch: str
    base_ref: str
    base_sha: str
    resumed: bool
    # The checkout's own git folder in the mirror, from the mirror's records: the worker's
    # git names it explicitly and never follows the checkout's `.git` file.
    git_dir: Path | None = None
    remote_url: str = ""

    @property
    def mirror(self) -> Path | None:
        return None if self.git_dir is None else self.git_dir.parent.parent


@dataclass(frozen=True)
class AgentGitView:
    """What the sandbox binds so the agent's git works: its own git folder (writable), a
    `.git` file naming it (read-only, over the checkout's), the mirror's objects (read-only)."""

    git_dir: Path
    git_file: Path
    objects: Path


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


def mirror_name(remote_url: str) -> str:
    """A readable, collision-free folder name for a remote's mirror."""
    parts = urlsplit(remote_url)
    readable = f"{parts.hostname or ''}{parts.path}" if parts.scheme else remote_url
    readable = MIRROR_NAME_RE.sub("_", readable.removesuffix(".git")).strip("._-")[-60:]
    digest = hashlib.sha256(remote_url.encode()).hexdigest()[:12]
    return f"{readable or 'repo'}-{digest}.git"


@contextmanager
def mirror_lock(mirror: Path) -> Iterator[None]:
    """Serialize fetches, worktree changes and pushes on one mirror, across processes.

    flock locks belong to the open file, so threads of one process exclude each other too.
    The lock file sits beside the mirror, so re-creating a corrupt mirror keeps it.
    """
    lock_path = mirror.with_name(mirror.name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def clear_stale_git_locks(mirror: Path, branch: str, run_id: str) -> None:
    """Remove the `.lock` files a killed worker's git left in what only lock holders write.

    git takes `<ref>.lock` files for every ref it updates and leaves them when it is killed
    (SIGKILL, the machine gone); the next fetch or commit then fails with "cannot lock ref".
    Fetches and pushes, the only writers of `refs/remotes/` and `packed-refs`, run under the
    mirror's flock, which the kernel released when the dead holder died: under it, such a lock
    is stale. The run's own branch and worktree are written only by the holder of the run's
    lock, which this process holds now. Locks of other runs' branches are left alone: their
    commits run beside us without the mirror's lock.
    """
    if not mirror.is_dir():
        return
    stale = [mirror / "packed-refs.lock", mirror / "refs" / "heads" / f"{branch}.lock"]
    stale += [mirror / "worktrees" / run_id / name for name in ("index.lock", "HEAD.lock")]
    remotes = mirror / "refs" / "remotes"
    stale += list(remotes.rglob("*.lock")) if remotes.is_dir() else []
    for path in stale:
        if path.is_file() and not path.is_symlink():
            path.unlink()
            where = str(path.relative_to(mirror))
            log.warning("stale git lock removed", extra={"run_id": run_id, "lock": where})


class RepositoryCache:
    """Bare mirrors under cache_dir/mirrors, one worktree per run under cache_dir/worktrees."""

    def __init__(
        self,
        cache_dir: Path,
        *,
        environment: Mapping[str, str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        spares_per_mirror: int = DEFAULT_SPARES_PER_MIRROR,
    ) -> None:
        self.cache_dir = cache_dir.resolve()
        # What git inherits for this cache's commands (proxies, CA files, the SSH agent, PATH),
        # from the environment its caller captured; None: nothing.
        self.environment = git_environment(environment or {})
        self.mirrors_dir = self.cache_dir / "mirrors"
        self.worktrees_dir = self.cache_dir / "worktrees"
        self.spares_dir = self.cache_dir / "spares"
        self.timeout_s = timeout_s
        self.spares_per_mirror = spares_per_mirror

    def mirror_path(self, remote_url: str) -> Path:
        return self.mirrors_dir / mirror_name(remote_url)

    def prepare(
        self,
        remote_url: str,
        *,
        branch: str,
        base_ref: str | None,
        run_id: str,
        credentials: GitCredentials | None = None,
    ) -> Worktree:
        """Fetch the mirror (creating it once) and give the run its worktree on `branch`."""
        _check_remote_url(remote_url)
        check_run_id(run_id)
        self._check_branch(branch)
        mirror = self.mirror_path(remote_url)
        path = self.worktrees_dir / run_id
        self.worktrees_dir.mkdir(parents=True, exist_ok=True)
        attempt = partial(
            self._fetch_and_checkout, mirror, path, remote_url, branch, base_ref, credentials
        )
        with mirror_lock(mirror):
            self._ensure_mirror(mirror, remote_url)
            clear_stale_git_locks(mirror, branch, run_id)
            try:
                worktree = attempt()
            except GitError as error:
                # A fetch can succeed on a store with missing objects (it trusts its refs), so
                # corruption often shows only at checkout; either way, start the mirror over.
                if not CORRUPTION_RE.search(error.stderr):
                    raise
                worktree = self._retry_after_recreate(mirror, remote_url, error, attempt)
        log.info(
            "worktree ready",
            extra={"run_id": run_id, "branch": branch, "resumed": worktree.resumed},
        )
        return worktree

    def _retry_after_recreate(
        self, mirror: Path, remote_url: str, corruption: GitError, attempt: Callable[[], Worktree]
    ) -> Worktree:
        reason = corruption.stderr.strip()[-300:]
        self._recreate_mirror(mirror, remote_url, reason)
        try:
            return attempt()
        except GitError as error:
            raise WorkspaceError(
                f"the repository cache for {remote_url} was corrupt ({reason}); it was "
                f"re-created, but preparing the worktree still failed: {error}"
            ) from error

    def _fetch_and_checkout(
        self,
        mirror: Path,
        path: Path,
        remote_url: str,
        branch: str,
        base_ref: str | None,
        credentials: GitCredentials | None,
    ) -> Worktree:
        self._fetch(mirror, remote_url, credentials)
        base_name, base_sha = self._resolve_base(mirror, remote_url, base_ref, credentials)
        remote_head = self._remote_branch_sha(mirror, branch)
        fresh = self._checkout(mirror, path, branch, remote_head or base_sha)
        # A reused checkout's lease lags when its worker was killed after a push landed but
        # before it recorded it; a remote head already in the checkout's history is that push
        # (a push by anyone else is not in it, and stays refused).
        if fresh or (remote_head is not None and self._has_commit(path, remote_head)):
            self._set_lease(path, remote_head)
        git_dir = _TRUSTED_CHECKOUTS[path.absolute()].git_dir
        resumed = remote_head is not None
        return Worktree(
            path, branch, base_name, base_sha, resumed, git_dir=git_dir, remote_url=remote_url
        )

    def secure(self, worktree: Worktree) -> None:
        """After the agent or a gate ran: the checkout's `.git` file and its repository's
        config back as reqdrive wrote them, so nothing they planted reaches the worker's git
        (unsandboxed they could write both); WorkspaceError if the mirror's records changed."""
        mirror, path = worktree.mirror, worktree.path
        if mirror is None or mirror.parent != self.mirrors_dir:
            raise WorkspaceError(f"{path} is not a worktree of this repository cache")
        if mirror_name(worktree.remote_url) != mirror.name:
            raise WorkspaceError(f"{path} does not belong to {worktree.remote_url}")
        with mirror_lock(mirror):
            if self._trust(mirror, path) != worktree.git_dir:
                raise WorkspaceError(f"the repository records of {path} changed; refusing to go on")
            _write_config(mirror, worktree.remote_url)

    def agent_view(self, worktree: Worktree, folder: Path) -> AgentGitView:
        """A git folder of the agent's own for one call, so its `git status/diff/add/commit`
        work in the sandbox while the mirror (config, hooks, refs, other runs' checkouts)
        stays out of reach: the run's branch at HEAD, the base branch, a copy of the index,
        and the mirror's objects borrowed read-only (alternates). What the agent commits
        there is dropped with the folder; the worker takes the change from the files."""
        mirror, admin = worktree.mirror, worktree.git_dir
        if mirror is None or admin is None:
            raise WorkspaceError(f"{worktree.path} has no known repository records")
        shutil.rmtree(folder, ignore_errors=True)  # never follows links the agent left
        git_dir = folder / "git"
        refs = {f"refs/heads/{worktree.branch}": head_sha(worktree.path)}
        base = f"refs/remotes/origin/{worktree.base_ref}"
        if self._git(["check-ref-format", "--normalize", base], admin, check=False) == base:
            refs[base] = worktree.base_sha  # a base given as a commit or an expression: skipped
        for ref, sha in refs.items():
            (git_dir / ref).parent.mkdir(parents=True, exist_ok=True)
            (git_dir / ref).write_text(f"{sha}\n", encoding="utf-8")
        (git_dir / "objects" / "info").mkdir(parents=True)
        (git_dir / "objects" / "info" / "alternates").write_text(f"{mirror / 'objects'}\n")
        (git_dir / "HEAD").write_text(f"ref: refs/heads/{worktree.branch}\n", encoding="utf-8")
        (git_dir / "config").write_text(
            "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
            f"[user]\n\tname = {COMMITTER_NAME}\n\temail = {COMMITTER_EMAIL}\n"
        )
        if (admin / "index").is_file():
            shutil.copyfile(admin / "index", git_dir / "index")
        git_file = folder / "dot-git"
        git_file.write_text(f"gitdir: {git_dir}\n", encoding="utf-8")
        return AgentGitView(git_dir=git_dir, git_file=git_file, objects=mirror / "objects")

    def check_worktree(self, worktree: Worktree) -> None:
        """Before a commit or push: the checkout is this cache's, on the run's branch, and its
        repository's config is the one reqdrive wrote; WorkspaceError if anything else."""
        self.secure(worktree)
        path = worktree.path
        head = self._git(["symbolic-ref", "--quiet", "HEAD"], path, check=False)
        if head != f"refs/heads/{worktree.branch}":
            raise WorkspaceError(
                f"{path} is on {head or 'a detached HEAD'}, not on the run's branch "
                f"{worktree.branch}; refusing to commit or push"
            )

    def push(
        self,
        worktree: Worktree,
        *,
        credentials: GitCredentials | None = None,
        force_with_lease: bool = True,
    ) -> str:
        """Push the worktree's HEAD to its branch; the lease is the remote head we last saw."""
        mirror = self._mirror_of(worktree)
        remote_url = self._verified_remote_url(mirror)
        ref = f"refs/heads/{worktree.branch}"
        if worktree.git_dir is not None:
            self.check_worktree(worktree)
        with mirror_lock(mirror):
            sha = head_sha(worktree.path)
            _write_config(mirror, remote_url)
            args = ["push", "--no-verify"]
            if force_with_lease:
                known = self._lease(worktree.path) or ""
                # An empty expectation means "the branch must not exist yet" to git.
                args.append(f"--force-with-lease={ref}:{known}")
            args += ["--", remote_url, f"{sha}:{ref}"]
            self._git(args, mirror, credentials)
            # Pushing to a URL (not a remote name) leaves the tracking ref alone.
            self._git(["update-ref", f"refs/remotes/origin/{worktree.branch}", sha], mirror)
            self._set_lease(worktree.path, sha)
        return sha

    def remove(self, worktree: Worktree) -> None:
        """Take the run's worktree away and delete its local branch (the pushed one stays).

        The checkout is cleaned and kept as a spare for the next run when there is room,
        otherwise removed with `git worktree remove --force` and pruned. Removing a worktree
        that is already gone does nothing (its stale branch is reset by the next prepare).
        """
        if not worktree.path.exists():
            forget_worktree(worktree.path)
            return
        mirror = self._mirror_of(worktree)
        with mirror_lock(mirror):
            if not self._park(mirror, worktree.path):
                self._drop_worktree(mirror, worktree.path)
            self._git(["branch", "-D", "--", worktree.branch], mirror, check=False)

    # mirror -----------------------------------------------------------------------------

    def _ensure_mirror(self, mirror: Path, remote_url: str) -> None:
        problem = self._mirror_problem(mirror)
        if problem == "missing":
            self._create_mirror(mirror, remote_url)
        elif problem:
            self._recreate_mirror(mirror, remote_url, problem)
        else:
            _write_config(mirror, remote_url)

    def _mirror_problem(self, mirror: Path) -> str:
        """Empty when the mirror is usable; otherwise why not ("missing" when absent).

        A changed config is no problem: _write_config puts it back.
        """
        if not mirror.exists():
            return "missing"
        try:
            # --git-dir: without it git would look upwards and judge an enclosing repository.
            is_bare = self._git(
                [f"--git-dir={mirror}", "rev-parse", "--is-bare-repository"], mirror
            )
        except GitError as error:
            return error.stderr.strip()[-300:] or "not a git repository"
        return "" if is_bare == "true" else "not a bare repository"

    def _create_mirror(self, mirror: Path, remote_url: str) -> None:
        # init + fetch with explicit refspecs instead of `clone --mirror`: a mirror refspec
        # (refs/*:refs/*) with --prune would delete the runs' local branches, and fetch refuses
        # to update a branch some worktree has checked out.
        mirror.parent.mkdir(parents=True, exist_ok=True)
        self._git(["init", "--bare", "--quiet", str(mirror)], mirror.parent)
        _write_config(mirror, remote_url)

    def _recreate_mirror(self, mirror: Path, remote_url: str, reason: str) -> None:
        log.warning("mirror corrupt, re-creating", extra={"mirror": str(mirror), "reason": reason})
        shutil.rmtree(mirror, ignore_errors=True)
        shutil.rmtree(self._spares_of(mirror), ignore_errors=True)  # they point into the old one
        if mirror.exists():
            raise WorkspaceError(
                f"the repository cache {mirror} is corrupt ({reason}) and could not be removed"
            )
        self._create_mirror(mirror, remote_url)

    def _fetch(self, mirror: Path, remote_url: str, credentials: GitCredentials | None) -> None:
        # The URL and refspecs are given explicitly so a changed mirror config cannot redirect
        # the fetch (or the token) elsewhere.
        args = ["fetch", "--prune", "--quiet", "--", remote_url, BRANCH_REFSPEC, TAG_REFSPEC]
        self._git(args, mirror, credentials)

    def _resolve_base(
        self,
        mirror: Path,
        remote_url: str,
        base_ref: str | None,
        credentials: GitCredentials | None,
    ) -> tuple[str, str]:
        name = base_ref or self._default_branch(mirror, remote_url, credentials)
        name = name.removeprefix("refs/heads/")
        for candidate in (f"refs/remotes/origin/{name}", f"refs/tags/{name}", name):
            sha = self._git(
                ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{candidate}^{{commit}}"],
                mirror,
                check=False,
            )
            if sha:
                return name, sha
        raise WorkspaceError(f"base ref {name!r} does not exist on {remote_url}")

    def _default_branch(
        self, mirror: Path, remote_url: str, credentials: GitCredentials | None
    ) -> str:
        # fetch does not record the remote's HEAD (before git 2.48), so ask for it; the default
        # branch can be renamed, so it is not cached.
        out = self._git(["ls-remote", "--symref", "--", remote_url, "HEAD"], mirror, credentials)
        match = SYMREF_RE.search(out)
        if match is None:
            raise WorkspaceError(f"{remote_url} has no default branch (is it empty?)")
        return match.group(1)

    def _remote_branch_sha(self, mirror: Path, branch: str) -> str | None:
        ref = f"refs/remotes/origin/{branch}"
        sha = self._git(["rev-parse", "--verify", "--quiet", ref], mirror, check=False)
        return sha or None

    # worktrees --------------------------------------------------------------------------

    def _checkout(self, mirror: Path, path: Path, branch: str, start: str) -> bool:
        """Reuse the run's worktree when it is intact and on `branch`, else build it afresh.

        A run resumed after a killed worker keeps its local commits (its checkpoint may name a
        commit that was not pushed yet); whatever the interrupted step left uncommitted is
        discarded, so the resumed step starts from a clean tree. Ignored files (dependency
        caches) are kept. Returns True when the checkout is new (or a spare), False if reused.
        """
        if path.exists() and self._is_worktree_on(mirror, path, branch):
            self._git(["reset", "--hard", "--quiet"], path)
            self._git(["clean", "-ffd", "--quiet"], path)
            return False
        self._drop_worktree(mirror, path)
        self._check_branch_free(mirror, branch)
        if not self._take_spare(mirror, path, branch, start):
            self._git(["worktree", "add", "--quiet", "-B", branch, str(path), start], mirror)
            self._trust(mirror, path)
        return True

    def _admin_dir(self, mirror: Path, path: Path) -> Path | None:
        """The checkout's git folder in the mirror, found from the mirror's own records (each
        names its checkout in `gitdir`), never from the checkout's `.git` file."""
        target = str(path.absolute() / ".git")
        admin_root = mirror / "worktrees"
        for admin in sorted(admin_root.iterdir()) if admin_root.is_dir() else ():
            try:
                recorded = (admin / "gitdir").read_text(encoding="utf-8").strip()
            except OSError:
                continue
            if recorded == target:
                return admin
        return None

    def _trust(self, mirror: Path, path: Path) -> Path:
        """Name the checkout's git folder for every later command, and put its `.git` file
        back as git wrote it (an unsandboxed agent may have pointed it elsewhere)."""
        admin = self._admin_dir(mirror, path)
        if admin is None:
            raise WorkspaceError(f"{path} is not a registered worktree of {mirror}")
        trust_worktree(path, admin, self.environment)
        git_file = path / ".git"
        if git_file.is_symlink() or git_file.is_dir():
            raise WorkspaceError(f"{git_file} was replaced; the worktree is rebuilt next time")
        git_file.write_text(f"gitdir: {admin}\n", encoding="utf-8")
        return admin

    def _has_commit(self, path: Path, sha: str) -> bool:
        """Whether `sha` is HEAD or one of its ancestors in the checkout at `path`."""
        # merge-base prints the commit itself exactly when it is an ancestor of HEAD.
        return self._git(["merge-base", sha, "HEAD"], path, check=False) == sha

    def _lease(self, path: Path) -> str | None:
        sha = self._git(["rev-parse", "--verify", "--quiet", LEASE_REF], path, check=False)
        return sha or None

    def _set_lease(self, path: Path, sha: str | None) -> None:
        if sha is None:
            self._git(["update-ref", "-d", LEASE_REF], path)
        else:
            self._git(["update-ref", LEASE_REF, sha], path)

    def _park(self, mirror: Path, path: Path) -> bool:
        """Keep a finished run's checkout, detached and clean, as a spare; False if not kept."""
        spares = self._spares_of(mirror)
        kept = list(spares.iterdir()) if spares.exists() else []
        if not path.exists() or len(kept) >= self.spares_per_mirror:
            return False
        try:
            self._trust(mirror, path)
            # Detaching frees the run's branch; --force drops what the run left uncommitted, and
            # -x too: nothing a run built or ignored may leak into the next one.
            self._git(["checkout", "--quiet", "--force", "--detach"], path)
            self._git(["clean", "-ffdxq"], path)
            spares.mkdir(parents=True, exist_ok=True)
            target = spares / f"{path.name}-{uuid.uuid4().hex[:8]}"
            self._git(["worktree", "move", str(path), str(target)], mirror)
        except (GitError, WorkspaceError):
            return False
        finally:
            forget_worktree(path)
        return True

    def _take_spare(self, mirror: Path, path: Path, branch: str, start: str) -> bool:
        """Move a spare checkout to `path` and switch it to `branch` at `start`."""
        spares = self._spares_of(mirror)
        if self.spares_per_mirror < 1 or not spares.exists():
            return False
        for spare in sorted(spares.iterdir()):
            try:
                self._git(["worktree", "move", str(spare), str(path)], mirror)
            except GitError:
                self._drop_worktree(mirror, spare)  # not a worktree of this mirror any more
                continue
            try:
                self._trust(mirror, path)
                # No clean here: the spare was cleaned (-x too) when it was parked, under this
                # lock; agents never see the spares (the sandbox binds only their own checkout).
                self._git(["checkout", "--quiet", "--force", "-B", branch, start], path)
            except (GitError, WorkspaceError):
                self._drop_worktree(mirror, path)
                return False
            return True
        return False

    def _spares_of(self, mirror: Path) -> Path:
        return self.spares_dir / mirror.name.removesuffix(".git")

    def _is_worktree_on(self, mirror: Path, path: Path, branch: str) -> bool:
        try:
            self._trust(mirror, path)
            current = self._git(["symbolic-ref", "--quiet", "HEAD"], path)
        except (GitError, WorkspaceError):
            forget_worktree(path)
            return False
        return current == f"refs/heads/{branch}"

    def _drop_worktree(self, mirror: Path, path: Path) -> None:
        forget_worktree(path)
        if path.exists():
            self._git(["worktree", "remove", "--force", "--force", str(path)], mirror, check=False)
            shutil.rmtree(path, ignore_errors=True)  # not a registered worktree, or half-made
        self._git(["worktree", "prune"], mirror)

    def _check_branch_free(self, mirror: Path, branch: str) -> None:
        listing = self._git(["worktree", "list", "--porcelain"], mirror)
        for block in listing.split("\n\n"):
            if f"branch refs/heads/{branch}" in block.splitlines():
                where = block.splitlines()[0].removeprefix("worktree ")
                raise WorkspaceError(f"branch {branch} is already checked out at {where}")

    # helpers ----------------------------------------------------------------------------

    def _git(
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

    def _check_branch(self, branch: str) -> None:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        ok = self._git(["check-ref-format", "--branch", branch], self.cache_dir, check=False)
        if ok != branch or branch.startswith("-"):
            raise WorkspaceError(f"{branch!r} is not a valid branch name")

    def _mirror_of(self, worktree: Worktree) -> Path:
        """The mirror a worktree belongs to, refusing one outside this cache."""
        mirror = worktree.mirror
        if mirror is None:  # a Worktree made by hand: ask git, through the checkout
            path = worktree.path
            common = self._git(["rev-parse", "--path-format=absolute", "--git-common-dir"], path)
            mirror = Path(common).resolve()
        if mirror.parent != self.mirrors_dir.resolve():
            raise WorkspaceError(f"{worktree.path} is not a worktree of this repository cache")
        return mirror

    def _verified_remote_url(self, mirror: Path) -> str:
        # The mirror's config is writable from the worktree; its name is the URL's hash, so a
        # changed URL (one that would receive the token) is caught here.
        url = self._git(["config", "--get", "remote.origin.url"], mirror, check=False)
        if not url or mirror_name(url) != mirror.name:
            raise WorkspaceError(f"the origin URL of {mirror} was changed; refusing to push")
        return url


def _check_remote_url(remote_url: str) -> None:
    parts = urlsplit(remote_url)
    if parts.scheme and (parts.username or parts.password):  # first: the message hides them
        raise WorkspaceError("credentials must not be part of the remote URL")
    if not remote_url or remote_url.startswith("-") or not remote_url.isprintable():
        raise WorkspaceError(f"{remote_url!r} is not a repository URL")


def _write_config(mirror: Path, remote_url: str) -> None:
    """Give the mirror back the config reqdrive wrote, dropping whatever was added since.

    Every worktree can write this file, and keys nobody can cancel from the command line would
    take the next fetch's or push's token elsewhere (url.*.insteadOf, http.proxy with
    http.sslVerify off) or run a program at checkout (filter drivers, core.sshCommand).
    """
    quoted = remote_url.replace("\\", "\\\\").replace('"', '\\"')
    text = (
        "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n"
        f'[remote "origin"]\n\turl = "{quoted}"\n\tfetch = {BRANCH_REFSPEC}\n'
        f"[user]\n\tname = {COMMITTER_NAME}\n\temail = {COMMITTER_EMAIL}\n"
    )
    staged = mirror / f"config.{uuid.uuid4().hex[:8]}"
    staged.write_text(text, encoding="utf-8")
    staged.replace(mirror / "config")  # atomic: a concurrent git reads the old or the new one
