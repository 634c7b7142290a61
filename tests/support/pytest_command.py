"""How the tests' fixture repositories run pytest in their checks.

The checks run with reqdrive's own interpreter, where hypothesis is installed: its pytest
plugin, loaded from an entry point, is rewritten into every check's fresh bytecode folder
(about 2 s of each check), and the fixture repositories use none of it. The cache provider
would write `.pytest_cache` into the worktree, which no check needs."""

from __future__ import annotations

QUIET_PLUGINS = "-p no:cacheprovider -p no:hypothesispytest"
PLAIN_PYTEST = f"python -m pytest -q {QUIET_PLUGINS}"
