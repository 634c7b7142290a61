"""Fake command agent told by its first argument what to do: ok, fail, hang, dump-env, leak."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

mode, args = sys.argv[1], sys.argv[2:]
prompt = sys.stdin.read()

if mode == "ok":
    # Proves it saw the prompt on stdin and as a file, and that it works in its cwd.
    Path("agent-was-here.txt").write_text(json.dumps({"argv": sys.argv, "stdin": prompt}))
    print(f"implemented: {prompt.splitlines()[0]}")
elif mode == "fail":
    print("could not do it", file=sys.stderr)
    sys.exit(int(args[0]))
elif mode == "hang":
    # A grandchild in a new session, out of reach of the process group, then wait forever.
    Path("child.pid").write_text(str(os.getpid()))
    subprocess.Popen(
        ["setsid", "sh", "-c", "echo $$ > grandchild.pid; exec sleep 600"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while not Path("grandchild.pid").exists() or not Path("grandchild.pid").read_text():
        time.sleep(0.02)
    print("started a grandchild", flush=True)
    time.sleep(600)
elif mode == "dump-env":
    Path(args[0]).write_text(json.dumps(dict(os.environ)))
elif mode == "leak":
    # Prints every credential it can see, and a token it was given in the prompt.
    for name, value in sorted(os.environ.items()):
        print(f"{name}={value}")
    print(prompt)
else:
    sys.exit(f"unknown mode {mode}")
