"""Node and a runner installed outside /usr (nvm's prefix, `npm install -g` into it) run in
the checks' sandbox with the runner's package and its own dependencies, found from the checks'
PATH alone."""

from __future__ import annotations

import json
import os
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
const name = `${dep.name} on ${process.execPath}`
require('fs').writeFileSync(process.env.REQDRIVE_JUNIT_XML, report(name))
"""
REPORT = """\
module.exports = (name) =>
  `<testsuite><testcase classname="unit" name="runs with ${name}"/></testsuite>`
"""


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    return project_factory(tmp_path)


def nvm_node(prefix: Path) -> None:
    """PREFIX/bin/node, as nvm installs one: the system's node, linked (or copied) there."""
    (prefix / "bin").mkdir(parents=True)
    system = Path(shutil.which("node") or "node").resolve()
    try:
        os.link(system, prefix / "bin" / "node")
    except OSError:
        shutil.copy2(system, prefix / "bin" / "node")


def global_install(prefix: Path) -> Path:
    """What `npm install -g fake-runner` leaves in PREFIX: the package (with a module of its
    own and a dependency in its node_modules) and a link to its CLI in PREFIX/bin."""
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
    (prefix / "bin" / "fake-runner").symlink_to("../lib/node_modules/fake-runner/bin/run.js")
    return prefix / "bin"


def test_node_and_a_runner_installed_outside_usr_run_in_the_sandbox(
    make_project: MakeProject, agent_io: Path, sandbox: Sandbox, tmp_path: Path
) -> None:
    prefix = tmp_path / "home" / ".nvm" / "versions" / "node" / "v20.0.0"
    nvm_node(prefix)
    bin_dir = global_install(prefix)
    project = make_project({"gates": [{"name": "unit", "command": "fake-runner", "junit": True}]})
    scenario = agent_io / "scenario.json"
    scenario.write_text(
        json.dumps({"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}})
    )
    result = project.run(scenario, sandbox=sandbox, gate_path=f"{bin_dir}:{SYSTEM_PATH}")

    [_, unit] = result.baseline_gates
    assert unit.passed, unit.output_tail
    # The runner's `#!/usr/bin/env node` found nvm's node, not /usr/bin/node.
    test_id = f"unit::runs with its own dependency on {bin_dir / 'node'}"
    assert unit.tests == {test_id: TestStatus.PASSED}
    assert result.ready
