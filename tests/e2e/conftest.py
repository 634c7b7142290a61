"""Fixtures of the deployed-stack scenarios (tests/e2e/test_deployed*.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.github_double import GitHubDouble, github_double


@pytest.fixture
def double(tmp_path: Path) -> Iterator[GitHubDouble]:
    with github_double(tmp_path / "github") as gh:
        yield gh
