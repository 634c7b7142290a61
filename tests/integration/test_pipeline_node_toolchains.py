"""A Node runner installed outside /usr (`npm install -g` with a prefix of one's own, as nvm
and ~/.npm-global users have it) runs in the checks' sandbox with its package and its own
dependencies, found from the checks' PATH alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.integration.test_pipeline import MakeProject, implement, prd, project_factory
from worker.confine.sandbox import Sandbox
from worker.model.gates import TestStatus

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("node") is None,
    reason="needs bubblewrap and node",
)
SYSTEM_PATH = "/usr/bin:/bin"
RUNNER = """\
#!/usr/bin/env node
const report = require('../lib/report')
const dep = require('dep')
require('fs').writeFileSync(process.env.REQDRIVE_JUNIT_XML, report(dep.name))
"""
REPORT = """\
module.exports = (name) =>
  `<testsuite><testcase classname="unit" name="runs with ${name}"/></testsuite>`
"""


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def global_install(prefix: Path) -> Path:
    """What `npm install -g --prefix PREFIX fake-runner` leaves: the package (with a module
    of its own and a dependency in its node_modules) and a link to its CLI in PREFIX/bin."""
    package = prefix / "lib" / "node_modules" / "fake-runner"
    files = {
        "package.json": json.dumps({"name": "fake-runner", "bin": {"fake-runner": "bin/run.js"}}),
        "bin/run.js": RUNNER,
        "lib/report.js": REPORT,
        "node_modules/dep/index.js": "module.exports = { name: 'its own dependency' }\n",
    }
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    (package / "bin/run.js").chmod(0o755)
    (prefix / "bin").mkdir()
    (prefix / "bin" / "fake-runner").symlink_to("../lib/node_modules/fake-runner/bin/run.js")
    return prefix / "bin"


def test_a_runner_in_a_node_modules_outside_usr_runs_in_the_sandbox(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox, tmp_path: Path
) -> None:
    bin_dir = global_install(tmp_path / "home" / ".npm-global")
    project = make_project({"gates": [{"name": "unit", "command": "fake-runner", "junit": True}]})
    scenario = agent_io / "scenario.json"
    scenario.write_text(
        json.dumps({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    )
    result = project.run(scenario, sandbox=sandbox, gate_path=f"{bin_dir}:{SYSTEM_PATH}")

    [_, unit] = result.baseline_gates
    assert unit.passed, unit.output_tail
    assert unit.tests == {"unit::runs with its own dependency": TestStatus.PASSED}
    assert result.ready
