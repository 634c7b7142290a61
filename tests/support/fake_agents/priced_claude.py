"""A stand-in for the Claude Code CLI that reports what it cost: the scripted agent does the
work (tests/support/scripted_agent.py), then a stream-json result line gives its cost, as
`claude -p --output-format stream-json` ends. Started through a shim named `claude` that puts
`--scenario S --cost USD` before the CLI's own arguments."""

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPTED_AGENT = Path(__file__).resolve().parents[1] / "scripted_agent.py"

args = sys.argv[1:]
scenario = args[args.index("--scenario") + 1]
cost = float(args[args.index("--cost") + 1])
run_dir = args[args.index("--add-dir") + 1]  # the hand-over folder planning writes prd.json to
prompt_file = Path(os.environ["HOME"]) / "prompt.md"
prompt_file.write_text(sys.stdin.read())
code = subprocess.call(
    [sys.executable, str(SCRIPTED_AGENT), "--scenario", scenario, "--prompt", str(prompt_file),
     "--run-dir", run_dir],
)  # fmt: skip
result = {
    "type": "result",
    "subtype": "success",
    "is_error": code != 0,
    "result": "done",
    "total_cost_usd": cost,
    "usage": {"input_tokens": 1000, "output_tokens": 100},
}
print(json.dumps(result), flush=True)
sys.exit(code)
