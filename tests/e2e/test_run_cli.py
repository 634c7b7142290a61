"""`reqdrive run` as a real process on a local checkout: exit codes, kill and resume."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.test_pipeline import GITIGNORE, PYTEST, SCRIPTED_AGENT, implement, prd
from tests.support.processes import running

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
REQUIREMENT = "docs/requirements/REQ-001-demo.md"
BRANCH = "reqdrive/req-001-demo"
TIMED_RE = re.compile(r"^\[\d+:\d\d\] (.*)$")
COMMAND_RE = re.compile(r" \([^()]*\) …$")
DURATION_RE = re.compile(r" \([\d.]+ s\)$")
UNCONFINED_RE = re.compile(r"runs? unconfined", re.IGNORECASE)


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A developer's checkout of a small project with the requirement committed."""
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    files = {
        ".gitignore": GITIGNORE,
        ".github/reqdrive.yml": yaml.safe_dump({"testCommand": PYTEST}),
        REQUIREMENT: "# REQ-001\nFour small features.\n",
        "tests/test_base.py": "def test_base():\n    assert True\n",
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    return repo


def scenario_file(tmp_path: Path, data: dict[str, Any]) -> Path:
    data.setdefault("calls_log", str(tmp_path / "calls.log"))
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(data))
    return path


def command(tmp_path: Path, scenario: Path, *extra: str) -> list[str]:
    template = (
        f"{sys.executable} {SCRIPTED_AGENT} --scenario {scenario} "
        "--prompt {prompt_file} --run-dir {run_dir}"
    )
    return [
        sys.executable,
        "-m",
        "worker.local.run_cli",
        REQUIREMENT,
        "--agent",
        "command",
        "--agent-command",
        template,
        "--work-dir",
        str(tmp_path / "work"),
        *extra,
    ]


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REQDRIVE_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def run_cli(cwd: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=environment(), capture_output=True, text=True, timeout=300
    )


def timed_lines(out: str) -> list[str]:
    """The `[m:ss]` lines, without their times, the commands and the durations."""
    found = []
    for line in out.splitlines():
        if match := TIMED_RE.match(line):
            found.append(DURATION_RE.sub("", COMMAND_RE.sub(" …", match[1])))
    return found


# A story's tests call's check run: its new tests, before its code, must fail.
TESTS_RUN = "US-00{n} attempt 1, its tests before its code (new ones must fail)"
ALIKE_RUN = "US-00{n} attempt 1, its new tests run as the proof ran them"


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [line.split(" pid=")[0] for line in lines]


def test_a_run_in_a_checkout_leaves_the_working_tree_alone_and_pushes_the_branch_back(
    tmp_path: Path, checkout: Path
) -> None:
    (checkout / "notes.txt").write_text("uncommitted work of the developer\n")
    scenario = scenario_file(
        tmp_path,
        {
            "plan": [{"prd": prd(2)}],
            "stories": {"US-001": [implement(1)], "US-002": [implement(2)]},
        },
    )
    done = run_cli(checkout, command(tmp_path, scenario, "--run-id", "demo"))

    assert done.returncode == 0, done.stderr
    assert "→ US-001 attempt 1" in done.stdout and "ready for review" in done.stdout
    assert "the agent runs unconfined" in done.stderr  # no --sandbox: said, not hidden
    # ...with what turned the sandbox off: not a variable the developer never set.
    assert "(off by default" in done.stderr
    assert "REQDRIVE_SANDBOX" not in done.stderr
    # No silent gap: each step, agent call and gate run says what runs now, then how it ended.
    assert timed_lines(done.stdout) == [
        "baseline: measuring the base commit",
        "baseline: running tests …",
        "baseline: tests: 1 test, 0 failing",
        "plan: planning the stories",
        "plan (attempt 1): agent working …",
        "plan (attempt 1): agent done, exit 0",
        "implement: implementing the stories",
        "US-001 attempt 1, its tests call: agent working …",
        "US-001 attempt 1, its tests call: agent done, exit 0",
        f"{TESTS_RUN.format(n=1)}: running tests …",
        f"{TESTS_RUN.format(n=1)}: tests: 1 test, 1 failing",
        "US-001 attempt 1: agent working …",
        "US-001 attempt 1: agent done, exit 0",
        "US-001 attempt 1: running tests …",
        "US-001 attempt 1: tests: 2 tests, 0 failing",
        # Its new test again at its own commit, narrowed as the proof ran it: alike.
        f"{ALIKE_RUN.format(n=1)}: running tests …",
        f"{ALIKE_RUN.format(n=1)}: tests: 1 test, 0 failing",
        "US-002 attempt 1, its tests call: agent working …",
        "US-002 attempt 1, its tests call: agent done, exit 0",
        f"{TESTS_RUN.format(n=2)}: running tests …",
        f"{TESTS_RUN.format(n=2)}: tests: 1 test, 1 failing",
        "US-002 attempt 1: agent working …",
        "US-002 attempt 1: agent done, exit 0",
        "US-002 attempt 1: running tests …",
        "US-002 attempt 1: tests: 3 tests, 0 failing",
        f"{ALIKE_RUN.format(n=2)}: running tests …",
        f"{ALIKE_RUN.format(n=2)}: tests: 1 test, 0 failing",
        "verify: checking the final branch",
        # US-002's own run judged the head with the same checks: not run a second time.
        "verify (not run again: this commit was judged with these checks): tests: 3 tests, "
        "0 failing",
        "deliver: writing the pull request body",
    ]
    assert git(checkout, "log", "--format=%s", f"main..{BRANCH}").splitlines() == [
        "feat: [US-002] - Feature 2",
        "test: [US-002] - Feature 2",
        "feat: [US-001] - Feature 1",
        "test: [US-001] - Feature 1",
    ]
    assert git(checkout, "symbolic-ref", "--short", "HEAD") == "main"
    assert git(checkout, "status", "--porcelain") == "?? notes.txt"
    assert not (checkout / "feature_1.py").exists()
    body = (tmp_path / "work/runs/demo/pr.md").read_text()
    assert "**2 stories: 2 passed**" in body


def test_an_invalid_plan_twice_exits_5_naming_the_problem(tmp_path: Path, checkout: Path) -> None:
    scenario = scenario_file(tmp_path, {"plan": [{"prd": {"userStories": []}}]})
    done = run_cli(checkout, command(tmp_path, scenario))
    assert done.returncode == 5
    assert "planning failed 2 times" in done.stderr
    assert "userStories has 0 stories; a plan needs 1 to 8" in done.stderr


@pytest.mark.parametrize(
    ("argv_tail", "code", "message"),
    [
        (
            ["docs/requirements/REQ-404.md"],
            8,
            "requirement file docs/requirements/REQ-404.md not found",
        ),
        (["Add a CSV export", "--base", "develop"], 8, "base branch 'develop' does not exist"),
    ],
)
def test_preflight_failures_exit_8(
    tmp_path: Path, checkout: Path, argv_tail: list[str], code: int, message: str
) -> None:
    argv = [
        sys.executable,
        "-m",
        "worker.local.run_cli",
        *argv_tail,
        "--work-dir",
        str(tmp_path / "w"),
    ]
    done = run_cli(checkout, argv)
    assert done.returncode == code and message in done.stderr


def test_outside_a_git_repository_exits_8(tmp_path: Path) -> None:
    done = run_cli(tmp_path, [sys.executable, "-m", "worker.local.run_cli", "Add X"])
    assert done.returncode == 8 and "not inside a git repository" in done.stderr


def test_a_bad_repository_config_exits_3_naming_the_key(tmp_path: Path, checkout: Path) -> None:
    (checkout / ".github/reqdrive.yml").write_text("maxIterations: lots\n")
    git(checkout, "commit", "-qam", "bad config")
    scenario = scenario_file(tmp_path, {"plan": [{"prd": prd(1)}]})
    done = run_cli(checkout, command(tmp_path, scenario))
    assert done.returncode == 3 and "key 'maxIterations'" in done.stderr


def test_an_error_message_is_redacted_before_it_is_printed(tmp_path: Path, checkout: Path) -> None:
    # The config error quotes the value it got; a token pasted into the wrong key stays hidden.
    token = "ghp_" + "q7W3e9R1t5" * 4
    (checkout / ".github/reqdrive.yml").write_text(f"maxIterations: {token}\n")
    git(checkout, "commit", "-qam", "a token in the wrong place")
    scenario = scenario_file(tmp_path, {"plan": [{"prd": prd(1)}]})
    done = run_cli(checkout, command(tmp_path, scenario))
    assert done.returncode == 3 and "key 'maxIterations'" in done.stderr
    assert "[REDACTED]" in done.stderr and token not in done.stderr


def wait_for(condition: Any, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.05)


def passed_in_checkpoint(path: Path) -> int:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return 0
    return sum(1 for s in data["stories"] if s["state"] == "passed")


def test_a_run_killed_after_story_2_of_4_resumes_at_story_3_without_redoing_or_duplicating(
    tmp_path: Path, checkout: Path
) -> None:
    scenario = scenario_file(
        tmp_path,
        {
            "plan": [{"prd": prd(4)}],
            # Story 3's first agent works for two minutes: the kill lands in the middle of it.
            "stories": {
                "US-001": [implement(1)],
                "US-002": [{**implement(2), "commit": "wip"}],
                "US-003": [
                    {**implement(3), "sleep_once": 120, "once_file": str(tmp_path / "slept")}
                ],
                "US-004": [implement(4)],
            },
        },
    )
    argv = command(tmp_path, scenario, "--run-id", "killed")
    checkpoint = tmp_path / "work/runs/killed/checkpoint.json"
    first = subprocess.Popen(
        argv,
        cwd=checkout,
        env=environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for(lambda: "US-003 1" in calls(tmp_path) or first.poll() is not None)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert passed_in_checkpoint(checkpoint) == 2
    assert "US-004 1" not in calls(tmp_path)
    # The agent runs in a session of its own, so it outlived the worker.
    agents = [
        int(line.split("pid=")[1]) for line in (tmp_path / "calls.log").read_text().splitlines()
    ]
    assert running(agents[-1])

    done = run_cli(checkout, argv)

    # The resumed run stopped the interrupted agent before reusing the worktree.
    assert not any(running(pid) for pid in agents)

    assert done.returncode == 0, done.stderr
    made = calls(tmp_path)
    assert made.count("plan 1") == 1
    assert made.count("US-001 1") == 1 and made.count("US-002 1") == 1
    # US-003's tests were frozen before the kill: only its implement call is made again.
    assert made[-3:] == ["US-003 1", "US-004 1 tests", "US-004 1"]
    assert made.count("US-003 1 tests") == 1
    subjects = git(checkout, "log", "--format=%s", f"main..{BRANCH}").splitlines()[::-1]
    assert subjects == [
        f"{kind}: [US-00{n}] - Feature {n}" for n in range(1, 5) for kind in ("test", "feat")
    ]
    result = json.loads((tmp_path / "work/runs/killed/verification-summary.json").read_text())
    assert result["stories"]["passed"] == 4 and result["ready"] is True


def test_literal_text_through_the_reqdrive_console_script(tmp_path: Path, checkout: Path) -> None:
    scenario = scenario_file(
        tmp_path, {"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}}
    )
    argv = command(tmp_path, scenario)
    reqdrive = Path(sys.executable).with_name("reqdrive")
    argv = [str(reqdrive), "run", "Add feature one\n\nIt returns 1.", *argv[4:]]
    done = run_cli(checkout, argv)
    assert done.returncode == 0, done.stderr
    assert git(checkout, "log", "--format=%s", "main..reqdrive/add-feature-one").splitlines() == [
        "feat: [US-001] - Feature 1",
        "test: [US-001] - Feature 1",
    ]
    plan_prompt = (tmp_path / "work/runs/add-feature-one/iteration-plan-1.prompt.md").read_text()
    assert '<requirement source="text">\nAdd feature one\n\nIt returns 1.' in plan_prompt


def test_the_command_agent_without_a_template_exits_5(tmp_path: Path, checkout: Path) -> None:
    argv = [
        sys.executable,
        "-m",
        "worker.local.run_cli",
        REQUIREMENT,
        "--agent",
        "command",
        "--work-dir",
        str(tmp_path / "w"),
    ]
    done = run_cli(checkout, argv)
    assert done.returncode == 5 and "needs a command template" in done.stderr


@pytest.mark.parametrize("step", ["plan", "story"])
def test_ctrl_c_stops_the_agent_and_exits_7(tmp_path: Path, checkout: Path, step: str) -> None:
    pids = tmp_path / "pids.txt"
    hang = {"hang": 300, "pids_file": str(pids)}
    if step == "plan":
        scenario = scenario_file(tmp_path, {"plan": [hang]})
    else:
        scenario = scenario_file(
            # The story's first call (its tests call) hangs.
            tmp_path,
            {"plan": [{"prd": prd(1)}], "stories": {"US-001": [{"tests": hang}]}},
        )
    process = subprocess.Popen(
        command(tmp_path, scenario),
        cwd=checkout,
        env=environment(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: pids.exists() or process.poll() is not None)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 7, stderr
    assert "stopping after the current step" in stderr
    assert not any(running(int(pid)) for pid in pids.read_text().split())
    # Stopped means stopped: no second planning attempt, no further story attempt.
    assert len(calls(tmp_path)) == (1 if step == "plan" else 2)


def test_the_default_work_dir_in_the_checkout_stays_out_of_git_status(
    tmp_path: Path, checkout: Path
) -> None:
    scenario = scenario_file(
        tmp_path, {"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}}
    )
    argv = command(tmp_path, scenario)
    del argv[argv.index("--work-dir") : argv.index("--work-dir") + 2]
    done = run_cli(checkout, argv)
    assert done.returncode == 0, done.stderr
    assert (checkout / ".reqdrive/runs/req-001-demo/pr.md").exists()
    assert git(checkout, "status", "--porcelain", "--untracked-files=all") == ""


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
def test_with_sandbox_on_the_agent_runs_confined(tmp_path: Path, checkout: Path) -> None:
    agent_io = tmp_path / "agent-io"  # shown read-only, like a toolchain
    agent_io.mkdir()
    probe = "tr '\\0' ' ' < /proc/1/environ > probe.txt; ls " + str(checkout) + " >> probe.txt"
    story = {**implement(1), "run": ["sh", "-c", probe]}
    scenario = agent_io / "scenario.json"
    scenario.write_text(
        json.dumps({"plan": [{"prd": prd(1)}], "stories": {"US-001": [story]}, "calls_log": ""})
    )
    env = environment()
    env["DEVELOPER_TOKEN"] = "developer-secret-3f0a9b"
    env["REQDRIVE_SANDBOX_READONLY"] = os.pathsep.join(
        [sys.prefix, sys.base_prefix, str(SCRIPTED_AGENT.parent), str(agent_io)]
    )
    argv = command(tmp_path, scenario, "--run-id", "boxed", "--sandbox", "on")
    done = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, timeout=300)

    assert done.returncode == 0, done.stderr
    assert "unconfined" not in done.stderr
    probe_text = git(checkout, "show", f"{BRANCH}:probe.txt")
    assert "developer-secret" not in probe_text and "DEVELOPER_TOKEN" not in probe_text
    assert ".github" not in probe_text  # the developer's checkout does not exist in there


def test_sandbox_on_without_bubblewrap_exits_2_saying_what_to_do(
    tmp_path: Path, checkout: Path
) -> None:
    bin_dir = tmp_path / "bin"  # git only: no bwrap on this PATH
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    env = {**environment(), "PATH": str(bin_dir)}
    scenario = scenario_file(tmp_path, {})
    argv = command(tmp_path, scenario, "--sandbox", "on")
    done = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, timeout=120)

    assert done.returncode == 2
    assert "bwrap is not installed" in done.stderr and "apt-get install bubblewrap" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_run_ending_in_a_draft_exits_9_and_json_says_which_story_failed(
    tmp_path: Path, checkout: Path
) -> None:
    (checkout / ".github/reqdrive.yml").write_text(
        yaml.safe_dump({"testCommand": PYTEST, "maxStoryRetries": 1})
    )
    git(checkout, "commit", "-qam", "one attempt per story")
    scenario = scenario_file(
        tmp_path,
        {
            "plan": [{"prd": prd(2)}],
            "stories": {"US-001": [implement(1, correct=False)], "US-002": [implement(2)]},
        },
    )
    done = run_cli(checkout, command(tmp_path, scenario, "--run-id", "demo", "--json"))

    assert done.returncode == 9, done.stderr
    outcome = json.loads(done.stdout[done.stdout.index("{") :])
    assert outcome["ready"] is False and outcome["exit_code"] == 9
    assert outcome["draft_reason"] == "1 of 2 stories did not pass: US-001 (failed)"
    assert [(s["id"], s["state"]) for s in outcome["stories"]] == [
        ("US-001", "failed"),
        ("US-002", "passed"),
    ]
    assert Path(outcome["run_dir"], "pr.md").is_file()


def test_a_requirement_named_by_its_number_runs_that_file(tmp_path: Path, checkout: Path) -> None:
    scenario = scenario_file(
        tmp_path, {"plan": [{"prd": prd(1)}], "stories": {"US-001": [implement(1)]}}
    )
    argv = command(tmp_path, scenario, "--json")
    argv[argv.index(REQUIREMENT)] = "REQ-001"
    done = run_cli(checkout, argv)

    assert done.returncode == 0, done.stderr
    assert f"REQ-001 is {REQUIREMENT}" in done.stderr
    outcome = json.loads(done.stdout[done.stdout.index("{") :])
    assert outcome["ready"] is True and outcome["branch"] == BRANCH


def test_a_requirement_number_that_names_no_file_is_refused_not_planned(
    tmp_path: Path, checkout: Path
) -> None:
    done = run_cli(checkout, [sys.executable, "-m", "worker.local.run_cli", "REQ-404"])
    assert done.returncode == 8
    assert "no requirement file named REQ-404*.md" in done.stderr
    assert not (checkout / ".reqdrive" / "runs").exists()


@pytest.mark.parametrize(
    ("option", "variable", "named", "blamed_wrongly"),
    [
        (["--sandbox", "off"], "on", "--sandbox off", "REQDRIVE_SANDBOX"),
        ([], "off", "REQDRIVE_SANDBOX=off", "--sandbox off"),
    ],
)
def test_the_unconfined_warning_names_what_turned_the_sandbox_off(
    tmp_path: Path,
    checkout: Path,
    option: list[str],
    variable: str,
    named: str,
    blamed_wrongly: str,
) -> None:
    scenario = scenario_file(tmp_path, {"plan": [{"prd": prd(1)}]})
    # --continue of a run that never was: refused right after the sandbox is chosen.
    argv = command(tmp_path, scenario, *option, "--continue", "never-ran")
    env = {**environment(), "REQDRIVE_SANDBOX": variable}
    done = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, timeout=60)

    assert done.returncode != 0
    warnings = [line for line in done.stderr.splitlines() if UNCONFINED_RE.search(line)]
    assert len(warnings) == 2, done.stderr
    assert all(named in line and blamed_wrongly not in line for line in warnings), done.stderr
    assert calls(tmp_path) == []
