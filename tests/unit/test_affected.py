"""A story's commit judged by the test files its change can affect: those whose imports reach
a changed file, or None (the whole suite) when the change is not one imports can tell about."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from worker.verdict import affected, imports
from worker.verdict.affected import affected_test_files
from worker.verdict.imports import cached_imports, forget_parsed, imports_of
from worker.verdict.test_side import TestSide

SIDE = TestSide.of(None)

SRC_LAYOUT = {
    "pyproject.toml": "[project]\nname = 'pkg'\n[tool.pytest.ini_options]\naddopts = '-q'\n",
    "src/pkg/__init__.py": "",
    "src/pkg/core.py": "from pkg.util import helper\n",
    "src/pkg/util.py": "def helper(): pass\n",
    "src/pkg/other.py": "X = 1\n",
    "tests/test_core.py": "from pkg.core import helper\n",
    "tests/test_other.py": "import pkg.other\n",
    "README.md": "# pkg\n",
}


@pytest.fixture(autouse=True)
def cold_cache() -> Iterator[None]:
    forget_parsed()
    yield
    forget_parsed()


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    return done.stdout


def write(root: Path, files: Mapping[str, str | None]) -> None:
    for path, text in files.items():
        target = root / path
        if text is None:
            target.unlink()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)


def make_repo(tmp_path: Path, files: Mapping[str, str]) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    write(root, files)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "start")
    return root


def story(root: Path, files: Mapping[str, str | None]) -> list[str] | None:
    """Commit a story's change (None deletes a file) and select for what it changed."""
    write(root, files)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "story")
    changed = git(root, "diff", "--name-only", "--no-renames", "HEAD~1", "HEAD").split()
    return affected_test_files(root, changed, SIDE)


def test_a_src_layout_change_selects_the_tests_that_reach_it(tmp_path: Path) -> None:
    root = make_repo(tmp_path, SRC_LAYOUT)
    assert story(root, {"src/pkg/util.py": "def helper(): return 1\n"}) == ["tests/test_core.py"]


def test_a_flat_layout_change_selects_the_tests_that_reach_it(tmp_path: Path) -> None:
    flat = {k.removeprefix("src/"): v for k, v in SRC_LAYOUT.items()}
    root = make_repo(tmp_path, flat)
    assert story(root, {"pkg/other.py": "X = 2\n"}) == ["tests/test_other.py"]


def test_relative_imports_are_placed_by_the_importing_file(tmp_path: Path) -> None:
    root = make_repo(
        tmp_path,
        {
            "app/__init__.py": "",
            "app/models.py": "A = 1\n",
            "app/views.py": "from .models import A\n",
            "app/api/__init__.py": "",
            "app/api/routes.py": "from ..views import A\n",
            "app/forms.py": "from . import models\n",
            "tests/test_routes.py": "from app.api.routes import A\n",
            "tests/test_forms.py": "import app.forms\n",
            "tests/test_alone.py": "import json\n",
        },
    )
    assert story(root, {"app/models.py": "A = 2\n"}) == [
        "tests/test_forms.py",
        "tests/test_routes.py",
    ]


def test_a_change_reached_through_a_chain_of_modules_selects_the_test(tmp_path: Path) -> None:
    root = make_repo(
        tmp_path,
        {
            "lib/a.py": "import lib.b\n",
            "lib/b.py": "from lib import c\n",
            "lib/c.py": "def f():\n    import lib.d\n",  # an import inside a function counts
            "lib/d.py": "D = 1\n",
            "test_a.py": "import lib.a\n",
            "test_b.py": "import lib.b\n",
            "test_other.py": "import lib.other\n",
            "lib/other.py": "",
        },
    )
    assert story(root, {"lib/d.py": "D = 2\n"}) == ["test_a.py", "test_b.py"]


def test_a_change_a_conftest_reaches_means_the_whole_suite(tmp_path: Path) -> None:
    files = {**SRC_LAYOUT, "tests/conftest.py": "from pkg import util\n"}
    root = make_repo(tmp_path, files)
    assert story(root, {"src/pkg/util.py": "def helper(): return 2\n"}) is None


def test_a_changed_conftest_means_the_whole_suite(tmp_path: Path) -> None:
    root = make_repo(tmp_path, {**SRC_LAYOUT, "tests/conftest.py": ""})
    assert story(root, {"tests/conftest.py": "import pytest\n"}) is None


def test_a_plugin_a_conftest_names_or_addopts_loads_counts_as_reached(tmp_path: Path) -> None:
    files = {**SRC_LAYOUT, "src/pkg/plugin.py": "", "src/pkg/fixtures.py": ""}
    files["tests/conftest.py"] = 'pytest_plugins = ["pkg.fixtures"]\n'
    files["pytest.ini"] = "[pytest]\naddopts = -p pkg.plugin\n"
    root = make_repo(tmp_path, files)
    assert story(root, {"src/pkg/fixtures.py": "F = 1\n"}) is None
    assert story(root, {"src/pkg/plugin.py": "P = 1\n"}) is None
    assert story(root, {"src/pkg/other.py": "X = 3\n"}) == ["tests/test_other.py"]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("src/pkg/data.json", None),
        ("src/pkg/core.pyi", None),
        ("requirements.txt", None),
        ("tests/data/expected.md", None),  # prose on the test side may be a test's data
        ("README.md", []),
        ("docs/guide.rst", []),
    ],
)
def test_a_change_that_is_not_python_means_the_whole_suite_unless_prose(
    tmp_path: Path, path: str, expected: list[str] | None
) -> None:
    root = make_repo(tmp_path, SRC_LAYOUT)
    assert story(root, {path: "changed\n"}) == expected


def test_prose_beside_a_code_change_does_not_widen_the_selection(tmp_path: Path) -> None:
    root = make_repo(tmp_path, SRC_LAYOUT)
    changed = {"README.md": "# new\n", "src/pkg/other.py": "X = 9\n"}
    assert story(root, changed) == ["tests/test_other.py"]


def test_a_changed_test_module_is_selected_itself(tmp_path: Path) -> None:
    root = make_repo(tmp_path, SRC_LAYOUT)
    changed = {"tests/test_new.py": "def test_x(): pass\n", "tests/test_other.py": "import os\n"}
    assert story(root, changed) == ["tests/test_new.py", "tests/test_other.py"]


def test_a_deleted_module_selects_the_tests_that_import_it(tmp_path: Path) -> None:
    root = make_repo(tmp_path, SRC_LAYOUT)
    assert story(root, {"src/pkg/util.py": None}) == ["tests/test_core.py"]


def test_a_deleted_test_module_is_not_selected(tmp_path: Path) -> None:
    root = make_repo(tmp_path, SRC_LAYOUT)
    assert story(root, {"tests/test_other.py": None}) == []


def test_an_import_that_matches_several_files_selects_all_their_importers(tmp_path: Path) -> None:
    root = make_repo(
        tmp_path,
        {
            "svc1/common/util.py": "",
            "svc2/common/util.py": "",
            "svc1/tests/test_one.py": "from common.util import *\n",
            "svc2/tests/test_two.py": "import common.util\n",
            "svc2/tests/test_three.py": "import common.other\n",
            "svc2/common/other.py": "",
        },
    )
    assert story(root, {"svc1/common/util.py": "U = 1\n"}) == [
        "svc1/tests/test_one.py",
        "svc2/tests/test_two.py",
    ]


def test_a_package_init_runs_before_what_it_holds(tmp_path: Path) -> None:
    files = {**SRC_LAYOUT, "tests/__init__.py": "", "tests/sub/__init__.py": ""}
    files["tests/sub/test_deep.py"] = "import os\n"
    root = make_repo(tmp_path, files)
    assert story(root, {"src/pkg/__init__.py": "V = 1\n"}) == [
        "tests/test_core.py",
        "tests/test_other.py",
    ]
    assert story(root, {"tests/__init__.py": "T = 1\n"}) == [
        "tests/sub/test_deep.py",
        "tests/test_core.py",
        "tests/test_other.py",
    ]


def test_a_linked_module_is_never_read_and_its_importers_always_selected(tmp_path: Path) -> None:
    files = {**SRC_LAYOUT, "tests/test_alias.py": "import pkg.alias\n"}
    root = make_repo(tmp_path, files)
    (root / "src/pkg/alias.py").symlink_to("other.py")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "link")
    # The link's target changes in this story: what reaches the link is selected too.
    assert story(root, {"src/pkg/util.py": "U = 1\n"}) == [
        "tests/test_alias.py",
        "tests/test_core.py",
    ]


def test_a_module_whose_worktree_file_became_a_link_is_not_followed(tmp_path: Path) -> None:
    root = make_repo(tmp_path, SRC_LAYOUT)
    (tmp_path / "outside.py").write_text("import pkg.util\n")
    (root / "src/pkg/other.py").unlink()
    (root / "src/pkg/other.py").symlink_to(tmp_path / "outside.py")
    # git's index still has a file there; the worktree has a link to outside it.
    assert affected_test_files(root, ["src/pkg/util.py"], SIDE) is None


def test_with_doctest_modules_the_modules_a_change_reaches_are_test_files_too(
    tmp_path: Path,
) -> None:
    files = dict(SRC_LAYOUT)
    files["pyproject.toml"] = "[tool.pytest.ini_options]\naddopts = ['--doctest-modules']\n"
    root = make_repo(tmp_path, files)
    # util.py's own doctests, core.py's (it imports util) and the tests importing either.
    assert story(root, {"src/pkg/util.py": "def helper(): return 1\n"}) == [
        "src/pkg/core.py",
        "src/pkg/util.py",
        "tests/test_core.py",
    ]
    # Doctests collected from files named by a glob cannot be followed: the whole suite.
    files["pyproject.toml"] = (
        "[tool.pytest.ini_options]\naddopts = ['--doctest-modules', '--doctest-glob=*.rst']\n"
    )
    (tmp_path / "glob").mkdir()
    root = make_repo(tmp_path / "glob", files)
    assert story(root, {"src/pkg/other.py": "X = 4\n"}) is None


def test_doctests_in_a_setup_cfg_mean_the_whole_suite_too(tmp_path: Path) -> None:
    files = {**SRC_LAYOUT, "setup.cfg": "[tool:pytest]\naddopts = --doctest-glob='*.md'\n"}
    root = make_repo(tmp_path, files)
    assert story(root, {"README.md": "    >>> 1\n    2\n"}) is None


def test_test_files_are_those_the_pytest_config_names(tmp_path: Path) -> None:
    files = {
        "tox.ini": "[pytest]\npython_files = check_*.py\n",
        "lib.py": "",
        "tests/check_lib.py": "import lib\n",
        "tests/test_lib.py": "import lib\n",
    }
    root = make_repo(tmp_path, files)
    assert story(root, {"lib.py": "L = 1\n"}) == ["tests/check_lib.py"]


def test_a_file_that_does_not_parse_imports_nothing(tmp_path: Path) -> None:
    files = {**SRC_LAYOUT, "src/pkg/broken.py": "import pkg.other\ndef (:\n"}
    files["tests/test_broken.py"] = "from pkg import broken\n"
    root = make_repo(tmp_path, files)
    assert story(root, {"src/pkg/broken.py": "def (::\n"}) == ["tests/test_broken.py"]
    assert story(root, {"src/pkg/other.py": "X = 5\n"}) == ["tests/test_other.py"]


def test_a_file_nested_past_the_recursion_limit_means_the_whole_suite(tmp_path: Path) -> None:
    # ast.parse raises RecursionError, no SyntaxError, on an expression this deep: its imports
    # cannot be read, and the selection must neither crash the run nor leave them out.
    deep = "import pkg.other\nX = " + " + ".join(["1"] * 5000) + "\n"
    root = make_repo(tmp_path, {**SRC_LAYOUT, "src/pkg/table.py": deep})
    assert story(root, {"src/pkg/util.py": "def helper(): return 2\n"}) is None


def test_constant_dynamic_imports_and_patch_targets_count(tmp_path: Path) -> None:
    files = {
        **SRC_LAYOUT,
        "tests/test_dynamic.py": 'import importlib\nM = importlib.import_module("pkg.other")\n',
        "tests/test_patch.py": 'def test_p(mp):\n    mp.setattr("pkg.util.helper", 1)\n',
        "tests/test_runtime.py": "import importlib\nimportlib.import_module(NAME)\n",
    }
    root = make_repo(tmp_path, files)
    assert story(root, {"src/pkg/other.py": "X = 6\n"}) == [
        "tests/test_dynamic.py",
        "tests/test_other.py",
    ]
    assert story(root, {"src/pkg/util.py": "U = 2\n"}) == [
        "tests/test_core.py",
        "tests/test_patch.py",
    ]


def test_a_changed_module_git_does_not_track_means_the_whole_suite(tmp_path: Path) -> None:
    root = make_repo(tmp_path, SRC_LAYOUT)
    (root / "src/pkg/stray.py").write_text("")
    assert affected_test_files(root, ["src/pkg/stray.py"], SIDE) is None


def test_a_path_outside_the_repository_means_the_whole_suite(tmp_path: Path) -> None:
    root = make_repo(tmp_path, SRC_LAYOUT)
    assert affected_test_files(root, ["../elsewhere.py"], SIDE) is None


def test_a_repository_past_the_file_bound_means_the_whole_suite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_repo(tmp_path, SRC_LAYOUT)
    monkeypatch.setattr(affected, "MAX_PY_FILES", 5)  # SRC_LAYOUT has six
    assert affected_test_files(root, ["src/pkg/other.py"], SIDE) is None
    monkeypatch.setattr(affected, "MAX_PY_FILES", 6)
    assert affected_test_files(root, ["src/pkg/other.py"], SIDE) == ["tests/test_other.py"]


def test_a_parsed_file_is_kept_by_blob_and_read_once() -> None:
    source = b"import pkg.a\n"
    reads: list[str] = []

    def read() -> tuple[bytes, bool]:
        reads.append("read")
        return source, True

    first = cached_imports("b1", "x/m.py", read)
    assert cached_imports("b1", "x/m.py", read) == first == (("pkg", "a"),)
    assert reads == ["read"]
    cached_imports("b2", "x/m.py", read)  # another blob at that path: read again
    assert reads == ["read", "read"]


def test_bytes_that_are_not_the_blob_are_parsed_but_not_kept() -> None:
    reads: list[str] = []

    def read() -> tuple[bytes, bool]:
        reads.append("read")
        return b"import a\n", False

    cached_imports("b1", "m.py", read)
    cached_imports("b1", "m.py", read)
    assert reads == ["read", "read"]


def test_the_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(imports, "PARSED_MAX", 3)
    for n in range(10):
        cached_imports(f"b{n}", "m.py", lambda: (b"import a\n", True))
    assert len(imports._parsed) == 3
    assert list(imports._parsed) == [("b7", "m.py"), ("b8", "m.py"), ("b9", "m.py")]


@pytest.mark.parametrize(
    ("path", "source", "expected"),
    [
        ("a/b/m.py", "from .... import x", []),  # climbs above the top: nothing
        ("a/b/m.py", "from ... import x", [("x",)]),
        ("a/b/m.py", "from .. import x", [("a",), ("a", "x")]),
        ("m.py", "from . import x", [("x",)]),
        ("a/m.py", "import_module('.sub')", [("a", "sub")]),
        ("m.py", "if TYPE_CHECKING:\n    import t\nelse:\n    import u", [("t",), ("u",)]),
        ("m.py", "try:\n    import t\nexcept ImportError:\n    import u", [("t",), ("u",)]),
        ("m.py", "mock.patch.dict('cfg.TABLE', {})", [("cfg", "TABLE")]),
        ("m.py", "pytest_plugins = 'a.plug'", [("a", "plug")]),
        ("m.py", "x = 'pkg.mod'", []),  # a string alone is not an import
        ("m.py", "import a\0", []),  # not Python: nothing
    ],
)
def test_what_a_file_imports(path: str, source: str, expected: list[tuple[str, ...]]) -> None:
    assert list(imports_of(path, source.encode())) == expected


def test_a_package_runs_before_a_namespace_folder_inside_it(tmp_path: Path) -> None:
    # pytest's importlib mode (with namespace packages) imports this as pkg.checks.test_x.
    files = {"pkg/__init__.py": "", "pkg/checks/test_x.py": "", "tests/test_y.py": ""}
    root = make_repo(tmp_path, files)
    assert story(root, {"pkg/__init__.py": "P = 1\n"}) == ["pkg/checks/test_x.py"]


def test_a_changed_module_no_test_imports_means_the_whole_suite(tmp_path: Path) -> None:
    # A console script a test starts as a process: no import reaches it.
    files = {**SRC_LAYOUT, "src/pkg/cli.py": "def main(): pass\n"}
    root = make_repo(tmp_path, files)
    assert story(root, {"src/pkg/cli.py": "def main(): return 1\n"}) is None
    assert story(root, {"src/pkg/cli.py": "import sys\n", "src/pkg/other.py": ""}) is None


def test_a_config_file_that_does_not_mention_pytest_is_not_read(tmp_path: Path) -> None:
    files = {**SRC_LAYOUT, "tests/fixtures/bad/setup.cfg": "not an ini file\n"}
    files["tests/fixtures/broken/pyproject.toml"] = "[tool.pytest\n"
    root = make_repo(tmp_path, files)
    assert story(root, {"src/pkg/other.py": "X = 7\n"}) is None  # one mentions pytest
    git(root, "rm", "-q", "tests/fixtures/broken/pyproject.toml")
    git(root, "commit", "-q", "-m", "fixture gone")
    assert story(root, {"src/pkg/other.py": "X = 8\n"}) == ["tests/test_other.py"]
