"""How the worker adds its own reporter to each runner, and what it says when it cannot."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.model.gates import GateSpec, Runner
from worker.verdict.runners import PLUGIN_DIR, hint, reporter_setup, runner_of

FOLDER = Path("/tmp/reqdrive-results-x")


def spec(command: str, **extra: object) -> GateSpec:
    return GateSpec.model_validate({"name": "tests", "command": command, **extra})


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            "npx jest --ci && echo done",
            f"npx jest --json --outputFile={FOLDER}/report.json --ci && echo done",
        ),
        (
            "npx vitest run --coverage",
            "npx vitest run --reporter=default --reporter=json "
            f"--outputFile.json={FOLDER}/report.json --coverage",
        ),
        (
            "node --test test/",
            "node --test --test-reporter=spec --test-reporter-destination=stdout "
            f"--test-reporter=junit --test-reporter-destination={FOLDER}/report.junit.xml test/",
        ),
    ],
)
def test_js_reporters_go_right_after_the_runner_s_word(command: str, expected: str) -> None:
    gate = spec(command)
    assert reporter_setup(gate, runner_of(gate), FOLDER, None, {}).command == expected


def test_pytest_gets_the_plugin_from_its_read_only_folder_and_the_ids_to_keep(
    tmp_path: Path,
) -> None:
    gate = spec("python -m pytest")
    setup = reporter_setup(gate, Runner.PYTEST, tmp_path, ["a::b"], {"PYTHONPATH": "src"})
    assert setup.command == "python -m pytest"
    assert setup.env["PYTHONPATH"] == f"{PLUGIN_DIR}:src"
    assert setup.env["PYTEST_ADDOPTS"].startswith("-p reqdrive_results --junitxml=")
    assert (tmp_path / "only.txt").read_text() == "a::b\n"
    assert setup.readonly == (PLUGIN_DIR,)


def test_go_gets_json_and_run_through_goflags() -> None:
    gate = spec("go test ./...")
    only = ["example.com/x::TestA/sub", "example.com/y::TestB"]
    setup = reporter_setup(gate, Runner.GO, FOLDER, only, {"GOFLAGS": "-mod=mod"})
    assert setup.env == {"GOFLAGS": "-mod=mod -json -run=^(TestA|TestB)$"}


def test_a_named_runner_wins_over_the_command() -> None:
    assert runner_of(spec("make check", runner="jest")) is Runner.JEST


def test_the_hint_for_a_script_names_the_runner_of_package_json(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text('{"scripts": {"test": "vitest run"}}')
    said = hint(None, spec("npm test"), tmp_path)
    assert said == (
        "gate tests (`npm test`) gives no per-test results; for vitest, set "
        "`testCommand: npx vitest run` in .github/reqdrive.yml (reqdrive adds "
        "--reporter=json --outputFile)"
    )
    cargo = hint(Runner.CARGO, spec("cargo test"), tmp_path)
    assert "cargo nextest run --profile ci" in cargo


def test_a_gate_that_names_its_own_report_keeps_its_command() -> None:
    command = "npx vitest run --reporter=junit --outputFile=reqdrive-junit.xml"
    gate = spec(command, junit="reqdrive-junit.xml")
    assert reporter_setup(gate, runner_of(gate), FOLDER, None, {}).command == command
    go = spec("go test -json ./... | go-junit-report > junit.xml", junit="junit.xml")
    assert reporter_setup(go, runner_of(go), FOLDER, None, {}).env == {}


def test_jest_is_given_the_files_and_names_asked_for() -> None:
    gate = spec("npx jest --ci")
    only = ["src/a.test.js::sum > adds (1+2)", "src/b.test.js::b works"]
    command = reporter_setup(gate, Runner.JEST, FOLDER, only, {}).command
    assert command == (
        f"npx jest --json --outputFile={FOLDER}/report.json 'src\\/a\\.test\\.js' "
        "'src\\/b\\.test\\.js' -t '^ ?(b works|sum adds \\(1\\+2\\))$' --ci"
    )
    vitest = reporter_setup(spec("npx vitest run"), Runner.VITEST, FOLDER, only[1:], {})
    assert vitest.command.endswith(" src/b.test.js -t '^ ?(b works)$'")
