"""Fake codex/aider: records how it was started in $HOME/agent-record.json, then exits."""

import json
import os
import sys
from pathlib import Path

argv = sys.argv
record = {
    "argv": argv,
    "cwd": os.getcwd(),
    "env": dict(os.environ),
    "stdin": sys.stdin.read(),
}
Path(os.environ["HOME"], "agent-record.json").write_text(json.dumps(record))
print("fake agent ran", flush=True)
if "--output-last-message" in argv:
    # The final message repeats the API key, as a careless agent might.
    last = Path(argv[argv.index("--output-last-message") + 1])
    last.write_text(f"done, key was {os.environ.get('OPENAI_API_KEY', '')}\n")
sys.exit(int(os.environ.get("LC_FAKE_EXIT", "0")))
