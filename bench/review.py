"""The blind review's cost per story beside the implement call's: time, tokens, dollars.

    .venv/bin/python -m bench.review --runs 3            # scripted agent and the real CLI
    .venv/bin/python -m bench.review --quick             # one run each

One story (two criteria, one test) on a fresh bare remote with pytest as its check, run with
`review: triangular` and `tests: together` (one call writes code and test): the implement
call, then agent B and agent C, then B and C once more for
the whole change. Two agents: the scripted agent started by the command runner (what the
worker pays around a call: prompt, view of the change, sandbox-free process start), and the
real Claude Code CLI behind the scripted Messages API (tests/support/fake_anthropic.py), whose
result line gives tokens and dollars. The scripted API's token counts are the script's: every
turn reports the same usage, so the dollar column differs only by the number of turns and by
the model each call asks for (the story's default, the review's `haiku`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.claude_cli import install_claude_cli  # noqa: E402
from tests.support.fake_anthropic import ToolCall, Turn, Usage, fake_anthropic, say, use  # noqa: E402
from worker.agents.claude import read_result  # noqa: E402
from worker.model.state import AttemptRecord, RunResult, StoryRecord  # noqa: E402
from worker.report.protocol import NullReporter  # noqa: E402
from worker.run.checkpoint_file import FileCheckpointStore  # noqa: E402
from worker.run.pipeline import Pipeline  # noqa: E402
from worker.run.review_step import review_root  # noqa: E402
from worker.run.spec import Requirement, RunSpec  # noqa: E402

SCRIPTED_AGENT = ROOT / "tests" / "support" / "scripted_agent.py"
PYTHON_DIR = Path(sys.executable).parent
REQUIREMENT = (
    "# REQ-001 Shouting\n\nA helper that makes a message loud for the alerts channel.\n\n"
    "## Acceptance criteria\n\n- Every letter of the message becomes a capital letter\n"
    "- The loud message always finishes with an exclamation mark\n"
)
STORY = {
    "id": "US-001",
    "title": "Make alert messages loud",
    "description": "As an operator I want loud alert messages",
    "acceptanceCriteria": [
        "Every letter of the message becomes a capital letter",
        "The loud message always finishes with an exclamation mark",
    ],
    "priority": 1,
    "passes": False,
    "attempts": 0,
    "notes": "",
}
PRD = {"version": "1", "project": "Shout", "sourceReq": "REQ-001", "userStories": [STORY]}
CODE = "def shout(text):\n    return text.upper() + '!'\n"
TEST = "from shout import shout\n\n\ndef test_shout():\n    assert shout('hi') == 'HI!'\n"
USAGE = Usage(input_tokens=3000, output_tokens=300)  # every scripted turn, implement or review


@dataclass
class CallTimer(NullReporter):
    """Each story agent call's own seconds, by label (its iteration)."""

    seconds: dict[str, float] = field(default_factory=dict)

    def agent_finished(self, label: str, seconds: float, ended: str) -> None:
        self.seconds[label] = seconds


@dataclass(frozen=True)
class Measure:
    """One story's implement call and its review, then the whole change's review."""

    implement_s: float
    review_s: float
    whole_s: float
    implement_prompt: int
    review_prompts: int  # B's and C's prompt characters
    implement_usd: float | None
    review_usd: float | None
    implement_tokens: int | None
    review_tokens: int | None
    story_wall_s: float


def make_remote(tmp: Path) -> Path:
    source = tmp / "source"
    (source / ".github").mkdir(parents=True)
    # tests: together: the story is one implement call writing code and test, the one call the
    # review's two are set beside (with tests first, the default, a story also pays a tests
    # call before it: bench/story_cost.py measures a story's calls).
    config = {
        "testCommand": "python -m pytest -q -p no:cacheprovider",
        "review": "triangular",
        "tests": "together",
    }
    (source / ".github" / "reqdrive.yml").write_text(json.dumps(config))
    (source / "docs" / "requirements").mkdir(parents=True)
    (source / "docs" / "requirements" / "REQ-001-shout.md").write_text(REQUIREMENT)
    (source / "test_base.py").write_text("def test_base():\n    assert True\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"]):
        subprocess.run(["git", *args], cwd=source, check=True)
    commit = ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "initial"]
    subprocess.run(["git", *commit], cwd=source, check=True)
    remote = tmp / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(source), str(remote)], check=True)
    return remote


def spec(tmp: Path, remote: Path, **values: object) -> RunSpec:
    requirement = Requirement(
        text=REQUIREMENT,
        source="docs/requirements/REQ-001-shout.md",
        slug="req-001-shout",
        repo_path="docs/requirements/REQ-001-shout.md",
    )
    return RunSpec(
        run_id="bench",
        requirement=requirement,
        remote_url=str(remote),
        work_dir=tmp / "work",
        base_ref="main",
        gate_path=f"{PYTHON_DIR}:/usr/bin:/bin",
        **values,  # type: ignore[arg-type]
    )


def scripted_values(tmp: Path) -> dict[str, object]:
    scenario = tmp / "scenario.json"
    steps = {"write": {"shout.py": CODE, "test_shout.py": TEST}}
    scenario.write_text(json.dumps({"plan": [{"prd": PRD}], "stories": {"US-001": [steps]}}))
    command = (
        f"{sys.executable} {SCRIPTED_AGENT} --scenario {scenario} "
        "--prompt {prompt_file} --run-dir {run_dir}"
    )
    return {
        "agent_runner": "command",
        "agent_command": command,
        "source_env": {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    }


def claude_script(work: Path) -> list[Turn]:
    handoff, worktree = work / "handoff" / "bench", work / "cache" / "worktrees" / "bench"
    out = review_root(work, "bench") / "out"

    def write(path: Path, text: str) -> Turn:
        return use(ToolCall("Write", {"file_path": str(path), "content": text}), usage=USAGE)

    description = {
        "summary": "Adds shout(), which upper-cases its input and appends an exclamation mark.",
        "behaviours": ["shout(text) returns text.upper() + '!'", "adds test_shout"],
    }
    met = [{"criterion": n, "status": "met", "evidence": "returns upper + '!'"} for n in (1, 2)]
    review = [
        write(out / "description.json", json.dumps(description)),
        say("described.", usage=USAGE),
        write(out / "discrepancies.json", json.dumps({"criteria": met})),
        say("compared.", usage=USAGE),
    ]
    return [
        write(handoff / "prd.json", json.dumps(PRD)),
        say("planned.", usage=USAGE),
        write(worktree / "shout.py", CODE),
        write(worktree / "test_shout.py", TEST),
        say("done.", usage=USAGE),
        *review,
        *review,
    ]


def one_run(kind: str) -> Measure:
    with tempfile.TemporaryDirectory(prefix="reqdrive-bench-review-") as name:
        tmp = Path(name)
        remote = make_remote(tmp)
        timer = CallTimer()
        if kind == "claude":
            binary = install_claude_cli()
            with fake_anthropic(claude_script(tmp / "work")) as server:
                env = {
                    "PATH": f"{binary.parent}:/usr/bin:/bin",
                    "LANG": "C.UTF-8",
                    "ANTHROPIC_API_KEY": "bench-key",
                    "ANTHROPIC_BASE_URL": server.url,
                }
                result = run(spec(tmp, remote, agent_runner="claude", source_env=env), timer)
                models = sorted({str(r.body.get("model")) for r in server.message_requests()})
                print(f"  (models asked for: {', '.join(models)})", file=sys.stderr)
        else:
            result = run(spec(tmp, remote, **scripted_values(tmp)), timer)
        return measure(result, timer, tmp / "work" / "runs" / "bench")


def run(run_spec: RunSpec, timer: CallTimer) -> RunResult:
    store = FileCheckpointStore(run_spec.work_dir / "runs")
    result = Pipeline(run_spec, reporter=timer, checkpoints=store).run()
    [story] = result.stories
    if str(story.state) != "passed" or result.review is None:
        raise SystemExit(f"the bench run did not pass its review: {story.state}")
    return result


def measure(result: RunResult, timer: CallTimer, run_dir: Path) -> Measure:
    story: StoryRecord = result.stories[0]
    attempt: AttemptRecord = story.attempts[-1]
    review = attempt.review
    assert review is not None and result.review is not None
    label = str(attempt.iteration)
    prompts = list(run_dir.glob("review-US-001.*.prompt.md"))
    implement = read_result(run_dir / f"iteration-{label}.log", 0)
    return Measure(
        implement_s=timer.seconds[label],
        review_s=review.duration_s,  # its calls' own seconds, as the agent's are timed
        whole_s=result.review.duration_s,
        implement_prompt=len((run_dir / f"iteration-{label}.prompt.md").read_text()),
        review_prompts=sum(len(p.read_text()) for p in prompts),
        implement_usd=attempt.cost_usd,
        review_usd=review.cost_usd,
        implement_tokens=_tokens(implement.input_tokens, implement.output_tokens)
        if implement
        else None,
        review_tokens=_tokens(review.input_tokens, review.output_tokens),
        story_wall_s=attempt.duration_s,
    )


def _tokens(inputs: int | None, outputs: int | None) -> int | None:
    return None if inputs is None else inputs + (outputs or 0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one run per agent")
    parser.add_argument("--no-claude", action="store_true", help="skip the Claude Code CLI row")
    args = parser.parse_args(argv)
    runs = 1 if args.quick else args.runs
    kinds = ["scripted"] + ([] if args.no_claude else ["claude"])
    print(
        "| agent | runs | implement call s | review B+C s | review / implement | whole-change "
        "review s | implement prompt chars | B+C prompt chars | implement tokens | review "
        "tokens | implement $ | review $ | review / implement $ |"
    )
    print("| --- |" + " ---: |" * 12)
    for kind in kinds:
        started = time.perf_counter()
        measures = [one_run(kind) for _ in range(runs)]
        print(row(kind, measures), flush=True)
        print(f"  ({kind}: {time.perf_counter() - started:.1f} s)", file=sys.stderr)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nload average {load}", file=sys.stderr)
    return 0


def row(kind: str, measures: list[Measure]) -> str:
    def med(values: list[float | int | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    implement = med([m.implement_s for m in measures]) or 0.0
    review = med([m.review_s for m in measures]) or 0.0
    impl_usd = med([m.implement_usd for m in measures])
    review_usd = med([m.review_usd for m in measures])
    usd_ratio = f"{review_usd / impl_usd:.2f}" if impl_usd and review_usd is not None else "—"
    cells = [
        kind,
        str(len(measures)),
        f"{implement:.2f}",
        f"{review:.2f}",
        f"{review / implement:.2f}" if implement else "—",
        f"{med([m.whole_s for m in measures]) or 0.0:.2f}",
        f"{med([m.implement_prompt for m in measures]):,.0f}",
        f"{med([m.review_prompts for m in measures]):,.0f}",
        _num(med([m.implement_tokens for m in measures])),
        _num(med([m.review_tokens for m in measures])),
        _usd(impl_usd),
        _usd(review_usd),
        usd_ratio,
    ]
    return "| " + " | ".join(cells) + " |"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _usd(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


if __name__ == "__main__":
    sys.exit(main())
