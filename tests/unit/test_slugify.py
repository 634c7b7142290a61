"""Branch names built from user text are safe git ref components."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bot.requests import JobKind, RunRequest
from bot.web.enqueue import SLUG_MAX, job_id_for
from worker.git.mirror import mirror_name
from worker.model.slugs import slugify


@pytest.mark.parametrize(
    ("text", "slug"),
    [
        ("REQ-001 Add login!!", "req-001-add-login"),
        ("Crème brûlée für Ärzte", "creme-brulee-fur-arzte"),
        ("../../etc/passwd", "etc-passwd"),
        ("--force", "force"),
        (".hidden.lock", "hidden-lock"),
        ("a..b", "a-b"),
        ("  many   spaces\tand\nlines  ", "many-spaces-and-lines"),
        ("feat/US_003: *stars* ~tilde^ caret? [x]", "feat-us-003-stars-tilde-caret-x"),
    ],
)
def test_user_text_becomes_a_readable_slug(text: str, slug: str) -> None:
    assert slugify(text) == slug


@pytest.mark.parametrize("text", ["", "   ", "!!!", "ログイン機能", "🚀🚀"])
def test_text_without_letters_still_gets_a_name(text: str) -> None:
    slug = slugify(text)
    assert slug.startswith("req-")
    assert len(slug) == len("req-") + 8


def test_different_non_latin_titles_get_different_branches() -> None:
    assert slugify("ログイン機能") != slugify("支払い機能")


def test_long_text_is_cut_without_a_trailing_dash() -> None:
    slug = slugify("word " * 40, max_len=20)
    assert len(slug) <= 20
    assert slug == "word-word-word-word"


def test_max_len_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_len"):
        slugify("x", max_len=0)


@pytest.mark.parametrize(
    "text", ["REQ-001 Add login!!", "../x", ".lock", "a..b.lock", "", "-", "@{-1}", "ä" * 100]
)
def test_every_slug_is_a_valid_branch_for_git(text: str, tmp_path: Path) -> None:
    slug = slugify(text)
    done = subprocess.run(
        ["git", "check-ref-format", "--branch", f"reqdrive/{slug}"],
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, slug
    assert not slug.startswith(("-", ".")) and not slug.endswith(".lock")


def test_mirror_names_hide_nothing_secret_and_do_not_collide() -> None:
    first = mirror_name("https://github.com/octo/app.git")
    second = mirror_name("https://github.com/octo_app.git")
    assert first.startswith("github.com_octo_app-")
    assert first != second
    assert "/" not in mirror_name("/srv/git/../../etc.git")


@pytest.mark.parametrize(
    "name", ["REQ-001-login", "REQ-002 Ünïcödé Lögin", "REQ-003-" + "long-" * 20, "需求"]
)
def test_a_job_id_names_the_requirement_by_the_slug_its_branch_uses(name: str) -> None:
    request = RunRequest.model_validate(
        {
            "kind": JobKind.RUN,
            "delivery_id": "d-1",
            "repo": "octo/app",
            "sender": "octocat",
            "requirement": f"docs/requirements/{name}.md",
        }
    )
    job_id = job_id_for(request)
    assert job_id.startswith(f"run-{slugify(name, max_len=SLUG_MAX)}-")
    assert job_id == job_id_for(request)  # deterministic
