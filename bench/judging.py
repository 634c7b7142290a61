"""What per-test judging costs per story: gate runs and wall time beside one plain test run.

    .venv/bin/python -m bench.judging --tests 300 --stories 3 --repeats 2

A repository with N passing pytest tests; a plan of S stories, each adding a module and a test
of its own (so each story also runs its new test on its parent commit). The reference is one
`python -m pytest` of the same suite, timed in the same run. Per story: gate rounds (the story's
own, plus the parent run), gate time, and the judging's own time (wall minus agent minus gates).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.integration.test_pipeline import project_factory
from worker.model.state import StoryState

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "judging.md"
PYTEST = f"{sys.executable} -m pytest -q -p no:cacheprovider"


def suite(tests: int) -> str:
    return "".join(f"def test_case_{n}():\n    assert {n} == {n}\n\n\n" for n in range(tests))


def story(n: int) -> dict[str, object]:
    return {
        "id": f"US-{n:03d}",
        "title": f"Feature {n}",
        "acceptanceCriteria": [f"feature_{n}.value() is {n}"],
        "priority": n,
    }


def adds_its_test(n: int) -> dict[str, object]:
    return {
        "write": {
            f"feature_{n}.py": f"def value():\n    return {n}\n",
            f"tests/test_feature_{n}.py": (
                f"from feature_{n} import value\n\n\ndef test_value():\n    assert value() == {n}\n"
            ),
        }
    }


def one_run(tests: int, stories: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="reqdrive-bench-judging-") as tmp:
        make = project_factory(Path(tmp))
        project = make({"testCommand": PYTEST}, files={"tests/test_suite.py": suite(tests)})
        started = time.perf_counter()
        subprocess.run(PYTEST.split(), cwd=Path(tmp) / "source", check=True, capture_output=True)
        plain = time.perf_counter() - started
        scenario = project.scenario(
            {
                "plan": [{"prd": {"userStories": [story(n) for n in range(1, stories + 1)]}}],
                "stories": {f"US-{n:03d}": [adds_its_test(n)] for n in range(1, stories + 1)},
            }
        )
        result = project.run(scenario)
        assert all(s.state is StoryState.PASSED for s in result.stories), result.stories
        run_dir = project.run_dir()
        rounds = [p for p in run_dir.glob("iteration-*.gates.json")]
        gate_s = sum(g["durationS"] for p in rounds for g in json.loads(p.read_text()))
        attempts = [a for s in result.stories for a in s.attempts]
        wall = sum(a.duration_s for a in attempts)
        return {
            "plain_pytest_s": plain,
            "rounds_per_story": len(rounds) / len(attempts),
            "gate_s_per_story": gate_s / len(attempts),
            "wall_s_per_story": wall / len(attempts),
        }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tests", type=int, default=300)
    parser.add_argument("--stories", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="20 tests, 1 story, 1 repeat")
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.name}")
    args = parser.parse_args()
    if args.quick:
        args.tests, args.stories, args.repeats = 20, 1, 1
    runs = [one_run(args.tests, args.stories) for _ in range(args.repeats)]
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    line = (
        f"{args.tests} tests, {args.stories} stories, {args.repeats} runs (medians): "
        f"plain pytest {median['plain_pytest_s']:.2f} s; per story "
        f"{median['rounds_per_story']:.1f} gate rounds, {median['gate_s_per_story']:.2f} s in "
        f"gates, {median['wall_s_per_story']:.2f} s wall"
    )
    print(line)
    if args.write:
        RESULTS.write_text(f"# Judging cost per story (`bench/judging.py`)\n\n{line}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
