"""Runs sharing a branch, against real git: a dead run's checkout freed, a branch set aside."""

from __future__ import annotations

import pytest

from tests.support.git_remote import BRANCH, Remote, commit, git, prepare
from tests.support.git_remote import cache as cache
from tests.support.git_remote import remote as remote
from worker.exceptions import GitError
from worker.git.cache import RepositoryCache
from worker.git.run_branches import release_run, remote_refs, runs_on, update_remote_refs

KEPT = "refs/reqdrive/runs/run-1"


def test_a_dead_runs_checkout_is_released_and_its_branch_free_for_another_run(
    cache: RepositoryCache, remote: Remote
) -> None:
    dead = prepare(cache, remote, "run-1")
    assert runs_on(cache, remote.url, BRANCH) == ["run-1"]

    release_run(cache, remote.url, "run-1", BRANCH, keep=True)

    assert runs_on(cache, remote.url, BRANCH) == []
    assert not dead.path.exists()
    assert len(list(cache.spares_dir.glob("*/run-1-*"))) == 1  # parked for reuse
    assert prepare(cache, remote, "run-2").path.exists()


def test_discarding_removes_the_runs_checkout_and_spares_but_no_other_runs(
    cache: RepositoryCache, remote: Remote
) -> None:
    runs = [prepare(cache, remote, "run-1"), prepare(cache, remote, "run-1-b", branch="b")]
    for worktree in runs:
        cache.remove(worktree)  # parked as spares, named after their runs
    mirror = cache.mirror_path(remote.url)
    git(mirror, "branch", BRANCH, "origin/main")  # as a run that failed before its push leaves it

    release_run(cache, remote.url, "run-1", BRANCH, keep=False)

    assert [p.name[:-9] for p in cache.spares_dir.glob("*/*")] == ["run-1-b"]
    assert git(mirror, "branch", "--list", BRANCH) == ""


def test_a_branch_is_set_aside_under_a_ref_in_one_push(
    cache: RepositoryCache, remote: Remote
) -> None:
    head = remote.new_branch(BRANCH, "story-1.txt")
    assert remote_refs(cache, remote.url, [f"refs/heads/{BRANCH}", KEPT]) == {
        f"refs/heads/{BRANCH}": head
    }

    changes = {KEPT: (None, head), f"refs/heads/{BRANCH}": (head, None)}
    update_remote_refs(cache, remote.url, changes)

    assert git(remote.bare, "for-each-ref", "--format=%(refname) %(objectname)") == (
        f"refs/heads/main {remote.head()}\n{KEPT} {head}"
    )
    assert not prepare(cache, remote, "run-2").resumed  # the next run starts from the base


def test_setting_aside_a_branch_that_moved_changes_nothing(
    cache: RepositoryCache, remote: Remote
) -> None:
    seen = remote.new_branch(BRANCH, "story-1.txt")
    git(remote.human, "checkout", "-q", BRANCH)
    moved = commit(remote.human, "story-2.txt", "two\n")
    git(remote.human, "push", "-q", "origin", f"HEAD:refs/heads/{BRANCH}")

    with pytest.raises(GitError):
        update_remote_refs(
            cache, remote.url, {KEPT: (None, seen), f"refs/heads/{BRANCH}": (seen, None)}
        )

    assert remote_refs(cache, remote.url, [f"refs/heads/{BRANCH}", KEPT]) == {
        f"refs/heads/{BRANCH}": moved
    }
