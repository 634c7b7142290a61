"""What a requirement file is: a REQ-*.md directly in the configured requirementsDir."""

from __future__ import annotations

import pytest

from worker.model.requirement_files import (
    is_requirement_file,
    is_requirement_name,
    requirements_folder,
)


@pytest.mark.parametrize(
    ("path", "folder"),
    [
        ("docs/requirements/REQ-001-export.md", "docs/requirements"),
        ("specs/REQ-002-x.md", "specs"),
        ("specs/REQ-002-x.md", "specs/"),  # a config may end the folder with a slash
        ("specs/REQ-002-x.md", "./specs"),
        ("REQ-1.md", "."),  # requirements at the top of the repository
    ],
)
def test_a_requirement_name_directly_in_the_folder_is_a_requirement(path: str, folder: str) -> None:
    assert is_requirement_file(path, folder)


@pytest.mark.parametrize(
    ("path", "folder"),
    [
        ("notes/REQ-003-y.md", "specs"),  # the name, in another folder
        ("docs/requirements/REQ-001.md", "specs"),  # the default folder, when the config moved it
        ("specs/drafts/REQ-004.md", "specs"),  # a subfolder holds drafts
        ("specs/notes.md", "specs"),
        ("specs/REQ-005.txt", "specs"),
        ("specs/req-006.md", "specs"),  # the name is case-sensitive, as git's paths are
        ("specs/REQ-.md", "specs"),
        ("xspecs/REQ-007.md", "specs"),
    ],
)
def test_anything_else_is_not(path: str, folder: str) -> None:
    assert not is_requirement_file(path, folder)


def test_the_name_alone_says_a_push_may_hold_a_requirement_somewhere() -> None:
    assert is_requirement_name("notes/REQ-003-y.md")
    assert not is_requirement_name("REQ-003/notes.md")


def test_the_folder_is_named_as_githubs_contents_api_wants_it() -> None:
    assert requirements_folder("specs/") == "specs"
    assert requirements_folder("./docs/requirements") == "docs/requirements"
    assert requirements_folder(".") == ""
