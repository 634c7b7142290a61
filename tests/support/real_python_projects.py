"""Real Python projects for the end-to-end tests, each with a real past fix taken back out.

Each project is a PyPI sdist that ships its own test suite, pinned by URL and sha256 (fetched at
test time by tests/support/pinned_sources.py, never kept in this repository). Its fix is one
taken from the project's changelog; the sdist holds both the fix and the test that came with
it, so the repository a test builds has the test and, with the fix's code taken out, a failing
requirement. The suites differ in shape: a unittest suite run by `python -m unittest`, a `src/`
layout installed editable, a single module with a plain pytest suite.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fix:
    """A real fix as the released source has it: `fixed` in `path`, and what it was before."""

    path: str
    fixed: str
    before: str
    wrong: str  # a plausible change that does not fix it: the draft case


@dataclass(frozen=True)
class RealProject:
    name: str
    url: str
    sha256: str
    fix: Fix
    # What `reqdrive init` says of the project as its maintainer has it.
    init_says: tuple[str, ...]
    # The maintainer's answer to init: its suggested setup (a venv with the project and
    # pytest), the tests started with the venv's python as its note says, and the lint.
    setup_extra: str  # what the maintainer adds to the setup init suggests
    test_command: str
    lint_command: str | None  # None: the maintainer removes the one init guessed
    requirement: str
    story_title: str
    criteria: tuple[str, ...]
    failing_tests: tuple[str, ...]  # test ids at the base that the fix makes pass
    # A second run with the wrong fix, ending a draft: left out where the suite is slow.
    try_wrong_fix: bool = True

    @property
    def slug(self) -> str:
        return self.name.replace("_", "-")


MORE_ITERTOOLS = RealProject(
    name="more-itertools",
    url=(
        "https://files.pythonhosted.org/packages/52/b8/"
        "c63995bebbb9ac9c059350e0fb8c82c2420c85aeca7d34e40aecf3df9281/"
        "more_itertools-11.2.1.tar.gz"
    ),
    sha256="cbf08fd0af284dc69718b9b76a8e6203df624d70209ea511e4219d350c856f63",
    # docs/versions.rst, 11.2.0: "sliced now raises ValueError for negative slice sizes".
    fix=Fix(
        path="more_itertools/more.py",
        fixed=(
            "    if n < 0:\n"
            "        raise ValueError('n must be at least 0')\n"
            "\n"
            "    iterator = takewhile(len, (seq[i : i + n] for i in count(0, n)))\n"
        ),
        before="    iterator = takewhile(len, (seq[i : i + n] for i in count(0, n)))\n",
        wrong=(
            "    if n < -1:\n"
            "        raise ValueError('n must be at least 0')\n"
            "\n"
            "    iterator = takewhile(len, (seq[i : i + n] for i in count(0, n)))\n"
        ),
    ),
    # Its tox.ini runs `python -m unittest`; pytest is nowhere among its dependencies.
    init_says=("a unittest suite", "pip install pytest"),
    setup_extra="",
    test_command=".venv/bin/python -m pytest -q",
    lint_command=None,
    requirement=(
        "# REQ-001: sliced() refuses a negative slice size\n\n"
        "`more_itertools.sliced(seq, n)` with a negative `n` silently yields a wrong result\n"
        "(`list(sliced('ABCDEFG', -1))` is `['ABCDEF']`).\n\n"
        "## Done when\n\n"
        "- `sliced(seq, n)` with `n < 0` raises `ValueError`, with or without `strict=True`\n"
        "  (tests/test_more.py, `SlicedTests.test_negative`).\n"
    ),
    story_title="sliced() raises ValueError for a negative n",
    criteria=("list(sliced('ABCDEFG', -1)) raises ValueError, strict or not",),
    failing_tests=("tests.test_more.SlicedTests::test_negative",),
    try_wrong_fix=False,  # its suite takes 13 s, run three times a run
)

CACHETOOLS = RealProject(
    name="cachetools",
    url=(
        "https://files.pythonhosted.org/packages/75/28/"
        "eb1ac766e4c0c439506a654186de8e2cfcd99035218a9393986103a0fdf0/cachetools-8.0.2.tar.gz"
    ),
    sha256="30ac523adfc118b51d2b2e7bad8a0ddb31370dfe2700c7f10ca224f36ccf81e0",
    # CHANGELOG.rst, v8.0.2: "Fix deep-copying TTLCache and TLRUCache instances whose timer
    # defines __deepcopy__."
    fix=Fix(
        path="src/cachetools/__init__.py",
        fixed=(
            "            return _TimedCache._Timer(self.__timer)\n"
            "\n"
            "        def __deepcopy__(self, memo):\n"
            "            # otherwise __getattr__ forwards to the timer's own __deepcopy__\n"
            "            import copy\n"
            "\n"
            "            return _TimedCache._Timer(copy.deepcopy(self.__timer, memo))\n"
            "\n"
        ),
        before="            return _TimedCache._Timer(self.__timer)\n\n",
        # Shares the original's timer: the copy's clock moves with the source's.
        wrong=(
            "            return _TimedCache._Timer(self.__timer)\n"
            "\n"
            "        def __deepcopy__(self, memo):\n"
            "            return self\n"
            "\n"
        ),
    ),
    init_says=("a src/ layout (cachetools)",),
    setup_extra="",
    test_command=".venv/bin/python -m pytest -q",
    lint_command=None,
    requirement=(
        "# REQ-001: Deep-copy a timed cache whose timer has its own __deepcopy__\n\n"
        "`copy.deepcopy()` of a `TTLCache` or `TLRUCache` whose timer defines `__deepcopy__`\n"
        "gives a cache that fails on first use (`TypeError` from `with self.timer`).\n\n"
        "## Done when\n\n"
        "- `copy.deepcopy()` of such a `TTLCache` or `TLRUCache` works, and the copy has a\n"
        "  timer of its own (tests/test_ttl.py and tests/test_tlru.py, "
        "`test_*_deepcopy_timer`).\n"
    ),
    story_title="Deep-copy TTLCache and TLRUCache with a deep-copyable timer",
    criteria=("copy.deepcopy() of a timed cache gives a working cache with its own timer",),
    failing_tests=(
        "tests.test_tlru.TLRUCacheTest::test_tlru_deepcopy_timer",
        "tests.test_ttl.TTLCacheTest::test_ttl_deepcopy_timer",
    ),
)

SIX = RealProject(
    name="six",
    url=(
        "https://files.pythonhosted.org/packages/94/e7/"
        "b2c673351809dca68a0e064b6af791aa332cf192da575fd474ed7d6f16a2/six-1.17.0.tar.gz"
    ),
    sha256="ff70335d468e7eb6ec65b95b99d3a2836546063f63acc5171de367e834932a81",
    # CHANGES, 1.12.0: "Issue #259, pull request #260: six.add_metaclass now preserves
    # __qualname__ from the original class."
    fix=Fix(
        path="six.py",
        fixed=(
            "        if hasattr(cls, '__qualname__'):\n"
            "            orig_vars['__qualname__'] = cls.__qualname__\n"
            "        return metaclass(cls.__name__, cls.__bases__, orig_vars)\n"
        ),
        before="        return metaclass(cls.__name__, cls.__bases__, orig_vars)\n",
        wrong=(
            "        orig_vars['__qualname__'] = cls.__name__\n"
            "        return metaclass(cls.__name__, cls.__bases__, orig_vars)\n"
        ),
    ),
    init_says=("a python project",),
    # Today's ruff finds 113 problems in six as released (written for Python 2 and 3): the
    # lint fails on the base, and a story is judged on the findings it adds.
    setup_extra=" ruff",
    test_command=".venv/bin/python -m pytest -q",
    lint_command=".venv/bin/ruff check --isolated .",
    requirement=(
        "# REQ-001: add_metaclass keeps a nested class's __qualname__\n\n"
        "A class decorated with `six.add_metaclass(Meta)` inside another class loses its\n"
        "qualified name: `A.B.__qualname__` becomes `'B'` (issue #259).\n\n"
        "## Done when\n\n"
        "- `six.add_metaclass` preserves `__qualname__` of the class it decorates\n"
        "  (test_six.py, `test_add_metaclass_nested`).\n"
    ),
    story_title="add_metaclass preserves __qualname__",
    criteria=("A.B.__qualname__ is the same with and without @six.add_metaclass",),
    failing_tests=("test_six::test_add_metaclass_nested",),
)

PROJECTS = (MORE_ITERTOOLS, CACHETOOLS, SIX)
