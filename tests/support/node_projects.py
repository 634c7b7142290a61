"""Real Node projects for the end-to-end tests: each as its npm tarball (pinned by version and
sha256, fetched into .cache/sources/ at test time), with one real past fix of the project
reverted and its test kept, so a requirement written from that fix arrives failing.

Each project's tarball ships its own test suite (checked when it was pinned: `npm view NAME@VER
dist.tarball dist.integrity` matched the downloaded file, and the tarball's tests are what its
test script runs: process-warning's `node --test` finds test/*.test.js, mpath's `mocha test/*`).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.support.pinned_sources import fetch_pinned, unpack

REGISTRY = "https://registry.npmjs.org"
GIT_IDENTITY = ["-c", "user.name=maintainer", "-c", "user.email=maintainer@example.invalid"]


@dataclass(frozen=True)
class NodeProject:
    """A published version of a project, the fix it carries, and that fix reverted."""

    name: str
    version: str
    sha256: str
    fix_file: str  # the file the fix changed
    revert: Callable[[str], str]  # the fixed file's text -> its text without the fix
    requirement: str  # REQ-001, written from the fix
    failing: tuple[str, ...]  # test ids ("classname::name") failing without the fix
    wrong_fix: Callable[[str], str]  # the reverted text -> a plausible fix that is wrong

    @property
    def url(self) -> str:
        return f"{REGISTRY}/{self.name}/-/{self.name}-{self.version}.tgz"


@dataclass(frozen=True)
class NodeCheckout:
    """A maintainer's checkout of the project at the commit where the fix is missing."""

    root: Path
    fixed_text: str  # the fix_file as the project published it
    wrong_text: str  # the fix_file with a wrong fix


def checkout(project: NodeProject, where: Path) -> NodeCheckout:
    """The tarball unpacked into a git repository: one commit as published, one reverting the
    fix (its tests kept)."""
    archive = fetch_pinned(project.url, project.sha256)
    root = unpack(archive, where / "unpacked")
    repo = where / project.name
    shutil.move(root, repo)
    fixed = (repo / project.fix_file).read_text()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, *GIT_IDENTITY, "commit", "-qm", f"{project.name} {project.version} as published")
    (repo / project.fix_file).write_text(project.revert(fixed))
    _git(repo, *GIT_IDENTITY, "commit", "-qam", "Revert the fix (its test is kept)")
    return NodeCheckout(repo, fixed, project.wrong_fix(project.revert(fixed)))


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def _replace(text: str, old: str, new: str) -> str:
    """`old` replaced by `new`, once: a pinned tarball whose text moved fails loudly here."""
    if text.count(old) != 1:
        raise AssertionError(f"the pinned source no longer holds exactly one {old!r}")
    return text.replace(old, new)


# process-warning 2.3.1 fixed fastify/process-warning#88: one options object shared by every
# warning, so creating an `unlimited` warning made the warnings created before it unlimited
# too. 3.0.0 rewrote the module around per-warning state and kept test/issue-88.test.js;
# the revert puts 2.3.0's shared object back into 5.0.0's code.
PW_LIMITED_CHECK = "      if (warning.emitted === true && warning.unlimited !== true) {\n"
PW_UNLIMITED_BLOCK = """\
  if (unlimited) {
    warningContainer = {
      [name]: function (a, b, c) {
        warning.emitted = true
        process.emitWarning(warning.format(a, b, c), warning.name, warning.code)
      }
    }
  }

"""


def _process_warning_revert(text: str) -> str:
    text = _replace(
        text,
        "const { format } = require('node:util')\n",
        "const { format } = require('node:util')\n\nconst opts = Object.create(null)\n",
    )
    text = _replace(
        text,
        "  let warningContainer = {\n",
        "  Object.assign(opts, { unlimited })\n\n  const warningContainer = {\n",
    )
    text = _replace(
        text, PW_LIMITED_CHECK, PW_LIMITED_CHECK.replace("warning.unlimited", "opts.unlimited")
    )
    return _replace(text, PW_UNLIMITED_BLOCK, "")


def _process_warning_wrong(text: str) -> str:
    """A "fix" that stops unlimited warnings from changing the shared options: limited ones
    keep their limit, unlimited ones lose theirs."""
    return _replace(
        text,
        "  Object.assign(opts, { unlimited })\n",
        "  if (!unlimited) Object.assign(opts, { unlimited })\n",
    )


PROCESS_WARNING = NodeProject(
    name="process-warning",
    version="5.0.0",
    # The registry's dist.integrity for this tarball (checked when pinned): sha512-a39t9ApHNx2L4
    # +HBnQKqxxHNs1r7KF+Intd8Q/g1bUh6q0WIp9voPXJ/x0j+ZL45KF1pJd9+q2jLIRMfvEshkA==
    sha256="9220188a409e3593eb8fb481d2f4714edfb8514aedfb8711a713fc2338fc6b92",
    fix_file="index.js",
    revert=_process_warning_revert,
    requirement="""\
# REQ-001: A warning keeps its own emission limit

## Why

fastify/process-warning#88: creating a warning with `unlimited: true` makes every warning
created before it unlimited too, so a warning meant to be emitted once is emitted on every call.

## What

- `createWarning()` keeps `unlimited` per warning: creating another warning never changes how
  an earlier one is emitted.

## Done when

- A warning created with the default `unlimited: false` is emitted once, even after a warning
  with `unlimited: true` was created (test/issue-88.test.js, "Must not overwrite config").
- A warning created with `unlimited: true` is still emitted on every call.

## Out of scope

- Message formatting and the deprecation helper.
""",
    failing=("test::Must not overwrite config",),
    wrong_fix=_process_warning_wrong,
)

# mpath 0.5.1 (History.md: "fix: prevent writing to constructor and prototype as well as
# __proto__"): `set()` refused only `__proto__`, so `constructor.prototype.x` still reached
# Object.prototype. test/index.js's "prevents writing to __proto__" guards it.
MPATH_IGNORED = "var ignoreProperties = ['__proto__', 'constructor', 'prototype'];\n"


def _mpath_revert(text: str) -> str:
    return _replace(text, MPATH_IGNORED, "var ignoreProperties = ['__proto__'];\n")


def _mpath_wrong(text: str) -> str:
    """A "fix" made in `unset()` only: `set()` still writes through `constructor`."""
    return _replace(
        text,
        "    if (ignoreProperties.indexOf(parts[i]) !== -1) {\n      return false;\n",
        "    if (['__proto__', 'constructor', 'prototype'].indexOf(parts[i]) !== -1) {\n"
        "      return false;\n",
    )


MPATH = NodeProject(
    name="mpath",
    version="0.9.0",
    # dist.integrity: sha512-ikJRQTk8hw5DEoFVxHG1Gn9T/xcjtdnOKIU1JTmGjZZlg9LST2mBLmcX3/ICIbgJydT2
    # GOc15RnNy5mHmzfSew==
    sha256="6188b4e083451c6b350b238271a18c129fa22b8b582022d297f570ffd0aaa827",
    fix_file="lib/index.js",
    revert=_mpath_revert,
    requirement="""\
# REQ-001: set() never writes to an object's prototype

## Why

`mpath.set('constructor.prototype.x', value, obj)` walks from any object to
`Object.prototype` and writes there: every object in the process then has `x` (prototype
pollution from unsanitized paths). Only `__proto__` is refused today.

## What

- `set()` and `unset()` ignore a path with a `__proto__`, `constructor` or `prototype` segment,
  as they already ignore `__proto__`.

## Done when

- `mpath.set('constructor.prototype.x', 'foobar', {})` leaves `({}).x` undefined (test/index.js,
  "prevents writing to __proto__").
- Every other path is set and unset as before.

## Out of scope

- `get()`'s handling of these names.
""",
    failing=("mpath set::prevents writing to __proto__",),
    wrong_fix=_mpath_wrong,
)

PROJECTS = (PROCESS_WARNING, MPATH)
