"""Measure webhook intake: reqdrive's web process beside a minimal Probot app, driven by wrk.

Both servers receive the same signed ~18 KB `issues.labeled` delivery at 1, 16 and 64
connections, for (a) a trigger that reqdrive enqueues and (b) an event reqdrive ignores
(`X-GitHub-Event: watch`, same bytes). Prints deliveries/s and p50/p99 latency per cell and
the reqdrive/Probot ratios of the same run.

    .venv/bin/python bench/intake.py            # the full run, about three minutes
    .venv/bin/python bench/intake.py --quick    # a smoke run of a few seconds per server

Needs wrk (Debian's package), node and npm (Probot is installed from the npm registry into a
temporary folder). It uses the Redis REQDRIVE_TEST_REDIS_URL names (the recorded run:
redis://127.0.0.1:6379), else a private embedded one; it claims a database of its own the way
the test suite does and flushes it before and after every cell.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.ops.replay import signature  # noqa: E402
from tests.support.redis_db import claimed_database, redis_server  # noqa: E402

LABELED_EXAMPLE = ROOT / "tests/fixtures/github/webhooks/issues/labeled.payload.json"
PROBOT_APP = Path(__file__).resolve().parent / "probot_app"
SECRET = "bench-webhook-secret"  # noqa: S105 - a loopback bench's own secret
TRIGGER_LABEL = "reqdrive"
IGNORED_EVENT = "watch"  # reqdrive never acts on stars
BODY_BYTES = 18 * 1024
REQDRIVE_PATH = "/webhook"
PROBOT_PATH = "/api/github/webhooks"
REQDRIVE_PORT, PROBOT_PORT = 38401, 38402
START_TIMEOUT_S = 30.0
# Issue numbers of the varied payload: fixed width, so every body has the same length.
NUMBER_BASE = 1_000_000_000
NUMBER_PLACEHOLDER = 987_654_321_987

# wrk's LuaJIT has no HMAC. Each request must carry a new issue number (or every delivery
# coalesces into one job) and so a new signature: the number sits at the very end of the body,
# the SHA-256 state of HMAC's inner hash over the constant prefix is computed once per thread,
# and each request hashes only the last block or two plus the outer block (~3 compressions).
WRK_SCRIPT = r"""
local bit = require("bit")
local band, bor, bxor, bnot = bit.band, bit.bor, bit.bxor, bit.bnot
local ror, rshift, lshift, tobit, tohex = bit.ror, bit.rshift, bit.lshift, bit.tobit, bit.tohex

local CONF = {CONF}
local K = {
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}
local IV = {
  0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
}
local W = {}

local function compress(H, s, off)
  for j = 0, 15 do
    local a, b, c, d = s:byte(off + j * 4, off + j * 4 + 3)
    W[j] = bor(lshift(a, 24), lshift(b, 16), lshift(c, 8), d)
  end
  for j = 16, 63 do
    local w15, w2 = W[j - 15], W[j - 2]
    local s0 = bxor(ror(w15, 7), ror(w15, 18), rshift(w15, 3))
    local s1 = bxor(ror(w2, 17), ror(w2, 19), rshift(w2, 10))
    W[j] = tobit(W[j - 16] + s0 + W[j - 7] + s1)
  end
  local a, b, c, d, e, f, g, h = H[1], H[2], H[3], H[4], H[5], H[6], H[7], H[8]
  for j = 0, 63 do
    local t1 = tobit(h + bxor(ror(e, 6), ror(e, 11), ror(e, 25))
      + bxor(band(e, f), band(bnot(e), g)) + K[j + 1] + W[j])
    local t2 = tobit(bxor(ror(a, 2), ror(a, 13), ror(a, 22))
      + bxor(band(a, b), band(a, c), band(b, c)))
    h, g, f, e, d, c, b, a = g, f, e, tobit(d + t1), c, b, a, tobit(t1 + t2)
  end
  H[1], H[2], H[3], H[4] = tobit(H[1] + a), tobit(H[2] + b), tobit(H[3] + c), tobit(H[4] + d)
  H[5], H[6], H[7], H[8] = tobit(H[5] + e), tobit(H[6] + f), tobit(H[7] + g), tobit(H[8] + h)
end

-- Finish a SHA-256 whose state H has already consumed `done` bytes; return the raw digest.
local function finish(H0, done, tail)
  local H = {H0[1], H0[2], H0[3], H0[4], H0[5], H0[6], H0[7], H0[8]}
  local bits = (done + #tail) * 8
  local zeros = (55 - (done + #tail)) % 64
  local hi, lo = math.floor(bits / 4294967296), bits % 4294967296
  local msg = tail .. "\128" .. string.rep("\0", zeros) .. string.char(
    band(rshift(hi, 24), 255), band(rshift(hi, 16), 255), band(rshift(hi, 8), 255), band(hi, 255),
    band(rshift(lo, 24), 255), band(rshift(lo, 16), 255), band(rshift(lo, 8), 255), band(lo, 255))
  for off = 1, #msg, 64 do compress(H, msg, off) end
  local out = {}
  for i = 1, 8 do
    local v = H[i]
    out[i] = string.char(band(rshift(v, 24), 255), band(rshift(v, 16), 255),
      band(rshift(v, 8), 255), band(v, 255))
  end
  return table.concat(out)
end

local function hex(raw)
  return (raw:gsub(".", function(ch) return string.format("%02x", ch:byte()) end))
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local data = f:read("*a")
  f:close()
  return data
end

local threads, next_id = {}, 1
function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

local prefix, inner, outer, inner_done, pending, fixed_body, fixed_sig
local n = 0

function init(args)
  if CONF.vary then
    prefix = read(CONF.prefix_file)
    local key = CONF.secret .. string.rep("\0", 64 - #CONF.secret)
    local ipad = key:gsub(".", function(ch) return string.char(bxor(ch:byte(), 0x36)) end)
    local opad = key:gsub(".", function(ch) return string.char(bxor(ch:byte(), 0x5c)) end)
    inner = {unpack(IV)}
    compress(inner, ipad, 1)
    local whole = #prefix - #prefix % 64
    for off = 1, whole, 64 do compress(inner, prefix, off) end
    inner_done, pending = 64 + whole, prefix:sub(whole + 1)
    outer = {unpack(IV)}
    compress(outer, opad, 1)
  else
    fixed_body = read(CONF.body_file)
    fixed_sig = CONF.signature
  end
end

local function signed(number)
  local tail = pending .. number .. CONF.suffix
  return prefix .. number .. CONF.suffix, hex(finish(outer, 64, finish(inner, inner_done, tail)))
end

function request()
  n = n + 1
  local body, sig = fixed_body, fixed_sig
  if CONF.vary then
    body, sig = signed(tostring(CONF.number_base + tid * 100000000 + n))
  end
  return wrk.format("POST", CONF.path, {
    ["Content-Type"] = "application/json",
    ["User-Agent"] = "GitHub-Hookshot/bench",
    ["X-GitHub-Event"] = CONF.event,
    ["X-GitHub-Delivery"] = string.format("%s-%04x-4%03x-8000-%012x", CONF.nonce, 0, tid, n),
    ["X-GitHub-Hook-ID"] = "1",
    ["X-Hub-Signature-256"] = "sha256=" .. sig,
  }, body)
end

if CONF.selftest then
  -- `wrk -s` runs this file once on load: print one signed body's digest for the harness to check.
  init({})
  tid = 1
  local body, sig = signed(tostring(CONF.number_base + 1))
  io.write(sig, " ", #body, "\n")
  os.exit(0)
end

function done(summary, latency, requests)
  local e = summary.errors
  local f = assert(io.open(CONF.out_file, "w"))
  f:write(string.format(
    '{"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, "mean_us": %.1f, ' ..
    '"max_us": %d, "connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    latency.mean, latency.max, e.connect, e.read, e.write, e.status, e.timeout))
  f:close()
end
"""


@dataclass(frozen=True)
class Payload:
    """The delivery body: fixed bytes, or a prefix and suffix around a varying issue number."""

    fixed: bytes
    prefix: bytes
    suffix: bytes

    def with_number(self, number: int) -> bytes:
        return self.prefix + str(number).encode() + self.suffix


@dataclass(frozen=True)
class Target:
    """One server under test."""

    name: str
    port: int
    path: str
    expected: dict[str, int]  # HTTP status per case, checked once before the load

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"


@dataclass(frozen=True)
class Cell:
    """One wrk run's outcome."""

    target: str
    case: str
    connections: int
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: int
    jobs: int | None

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def requirement_text(size: int) -> str:
    """A requirement as maintainers write them in issues: context, stories, criteria."""
    lines = [
        "## Context",
        "",
        "Teams export invoices by hand every month. We want a scheduled export that writes",
        "CSV and JSON files to the configured bucket and tells the finance channel when done.",
        "",
        "## Requirements",
        "",
    ]
    section = 1
    while sum(len(line) + 1 for line in lines) < size:
        lines += [
            f"### R{section}: export step {section}",
            "",
            f"As a finance lead I want step {section} of the monthly export to run unattended,",
            "so that nobody has to remember it on the first working day of the month.",
            "",
            "Acceptance criteria:",
            f"- [ ] `reqdrive export --step {section}` writes `exports/{section:03d}.csv` with a",
            "      header row, one row per invoice, amounts in minor units, ISO 8601 dates",
            f"- [ ] a failed step {section} leaves no partial file and exits with status 2",
            f"- [ ] tests in `tests/test_export_{section:03d}.py` cover an empty month and a",
            "      month with 10,000 invoices; `pytest -q` passes",
            "",
        ]
        section += 1
    return "\n".join(lines)[:size]


def build_payload() -> Payload:
    """GitHub's `issues.labeled` example as an App receives it, labelled `reqdrive`, body
    padded to ~18 KB.

    The issue moves to the end of the object with `number` as its last key, so a bench
    client can vary the number by rewriting the last few bytes only.
    """
    example = json.loads(LABELED_EXAMPLE.read_text())
    label = dict(example["label"], name=TRIGGER_LABEL, default=False)
    label["url"] = label["url"].rsplit("/", 1)[0] + "/" + TRIGGER_LABEL
    issue = {k: v for k, v in example["issue"].items() if k != "number"}
    issue["labels"] = [*issue.get("labels", []), label]
    payload = {k: v for k, v in example.items() if k != "issue"}
    payload["label"] = label
    # GitHub adds the installation to every delivery it sends to an App (intake refuses a
    # trigger without one); octokit's example of it.
    payload["installation"] = {"id": 1, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMQ=="}

    def render(body: str) -> bytes:
        issue["body"] = body
        issue["number"] = NUMBER_PLACEHOLDER
        return json.dumps({**payload, "issue": issue}, separators=(",", ":")).encode()

    overhead = len(render(""))
    text = requirement_text(BODY_BYTES - overhead)
    raw = render(text)
    raw = render(text[: len(text) - (len(raw) - BODY_BYTES)])  # JSON escapes the newlines
    prefix, _, suffix = raw.rpartition(str(NUMBER_PLACEHOLDER).encode())
    assert suffix == b"}}", suffix
    return Payload(fixed=prefix + str(NUMBER_BASE).encode() + suffix, prefix=prefix, suffix=suffix)


def sign(body: bytes) -> str:
    return signature(SECRET, body)


def lua_string(value: str) -> str:
    return json.dumps(value)  # JSON string escapes are valid Lua for the ASCII we pass


def write_script(
    workdir: Path, payload: Payload, event: str, path: str, vary: bool, out: Path, nonce: str
) -> Path:
    """Write the wrk script for one cell; the configuration is inlined as a Lua table."""
    body_file, prefix_file = workdir / "body.json", workdir / "prefix.json"
    body_file.write_bytes(payload.fixed)
    prefix_file.write_bytes(payload.prefix)
    conf = {
        "body_file": lua_string(str(body_file)),
        "prefix_file": lua_string(str(prefix_file)),
        "suffix": lua_string(payload.suffix.decode()),
        "signature": lua_string(sign(payload.fixed).removeprefix("sha256=")),
        "secret": lua_string(SECRET),
        "event": lua_string(event),
        "path": lua_string(path),
        "out_file": lua_string(str(out)),
        "nonce": lua_string(nonce),
        "number_base": str(NUMBER_BASE),
        "vary": "true" if vary else "false",
        "selftest": "false",
    }
    table = "{" + ", ".join(f"{k} = {v}" for k, v in conf.items()) + "}"
    script = workdir / f"{out.stem}.lua"
    script.write_text(WRK_SCRIPT.replace("{CONF}", table))
    return script


def check_lua_signing(workdir: Path, payload: Payload) -> None:
    """Run the wrk script's signing once and compare it with bot.ops.replay's signature."""
    out = workdir / "selftest.json"
    script = write_script(workdir, payload, "issues", "/", True, out, "00000000")
    script.write_text(script.read_text().replace("selftest = false", "selftest = true"))
    result = subprocess.run(
        ["wrk", "-t1", "-c1", "-d1s", "-s", str(script), "http://127.0.0.1:9/"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    sig, _, length = result.stdout.strip().partition(" ")
    body = payload.with_number(NUMBER_BASE + 1)
    expected = sign(body).removeprefix("sha256=")
    if sig != expected or int(length or 0) != len(body):
        raise SystemExit(f"wrk script signs wrongly: {result.stdout!r} {result.stderr!r}")


def procfile_web() -> str:
    procfile = ROOT / "Procfile"
    for line in procfile.read_text().splitlines():
        name, _, command = line.partition(":")
        if name.strip() == "web":
            return command.strip()
    raise SystemExit(f"no web: line in {procfile}")


@contextmanager
def running(command: str, env: dict[str, str], port: int, log: Path) -> Iterator[None]:
    """Start a server command in its own process group; stop the whole group afterwards."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["sh", "-c", f"exec {command}"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for_port(port, proc, log)
        yield
    finally:
        stop_group(proc)


def wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                time.sleep(0.5)  # let every worker of a pre-fork server come up
                return
        time.sleep(0.1)
    stop_group(proc)
    raise SystemExit(f"nothing listened on {port} within {START_TIMEOUT_S}s:\n{log.read_text()}")


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def post(target: Target, event: str, body: bytes, delivery: str) -> int:
    request = urllib.request.Request(  # noqa: S310 - a loopback URL built above
        target.url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": sign(body),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def preflight(targets: list[Target], payload: Payload, cases: dict[str, str]) -> None:
    """One delivery of each case to each server: the load means nothing if these are wrong."""
    for target in targets:
        for case, event in cases.items():
            body = payload.with_number(NUMBER_BASE - 1)
            status = post(target, event, body, f"preflight-{target.name}-{case}-{time.time_ns()}")
            want = target.expected[case]
            print(f"  preflight {target.name:8} {case}: HTTP {status} (want {want})")
            if status != want:
                raise SystemExit(f"{target.name} answered {status} to {case}; expected {want}")


def run_wrk(
    workdir: Path,
    target: Target,
    payload: Payload,
    case: str,
    event: str,
    vary: bool,
    connections: int,
    seconds: float,
) -> dict[str, float]:
    nonce = f"{time.time_ns() & 0xFFFFFFFF:08x}"
    out = workdir / f"{target.name}-{case}-{connections}-{nonce}.json"
    script = write_script(workdir, payload, event, target.path, vary, out, nonce)
    threads = min(2, connections)
    duration = max(1, round(seconds))  # wrk takes whole seconds
    argv = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}s", "--timeout", "5s"]
    result = subprocess.run(
        [*argv, "-s", str(script), target.url],
        capture_output=True,
        text=True,
        timeout=duration + 60,
    )
    if result.returncode != 0 or not out.exists():
        raise SystemExit(f"wrk failed ({result.returncode}): {result.stdout}{result.stderr}")
    return dict(json.loads(out.read_text()))


def queued_jobs(conn: redis.Redis, queue: str) -> int:
    return int(conn.llen(f"rq:queue:{queue}"))


def measure(args: argparse.Namespace, setup: list[str]) -> list[Cell]:
    """Run every cell; append what was measured how to `setup` for the record."""
    payload = build_payload()
    setup.append(f"payload: {len(payload.fixed)} bytes, issues.labeled, label {TRIGGER_LABEL!r}")
    print(setup[-1])
    cases = {"trigger": "issues", "ignored": IGNORED_EVENT}
    # The Procfile binds every interface for a platform's router; a load test stays on loopback.
    web = (args.web or procfile_web()).replace("0.0.0.0", "127.0.0.1")  # noqa: S104
    reqdrive = Target("reqdrive", REQDRIVE_PORT, REQDRIVE_PATH, {"trigger": 202, "ignored": 204})
    probot = Target("probot", PROBOT_PORT, PROBOT_PATH, {"trigger": 200, "ignored": 200})
    targets = [reqdrive] if args.no_probot else [reqdrive, probot]
    cells: list[Cell] = []
    with (
        tempfile.TemporaryDirectory(prefix="reqdrive-bench-") as tmp,
        redis_server() as base_url,
        claimed_database(base_url) as redis_url,
    ):
        workdir = Path(tmp)
        check_lua_signing(workdir, payload)
        conn = redis.Redis.from_url(redis_url)
        conn.flushdb()
        env = {
            **os.environ,
            "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}",
            "PORT": str(REQDRIVE_PORT),
            "REDIS_URL": redis_url,
            "GITHUB_WEBHOOK_SECRET": SECRET,
            "REQDRIVE_TRIGGER_LABEL": TRIGGER_LABEL,
        }
        setup.append(f"reqdrive web: `{web}`")
        print(f"{setup[-1]} (REDIS_URL={redis_url})")
        with (
            running(web, env, REQDRIVE_PORT, workdir / "reqdrive.log"),
            probot_server(workdir, args.no_probot, setup),
        ):
            preflight(targets, payload, cases)
            for case, event in cases.items():
                for connections in args.connections:
                    for target in targets:
                        conn.flushdb()
                        vary = case == "trigger" and not args.same_issue
                        if args.warmup:
                            run_wrk(workdir, target, payload, case, event, vary, connections,
                                    args.warmup)  # fmt: skip
                            conn.flushdb()
                        result = run_wrk(
                            workdir, target, payload, case, event, vary, connections, args.seconds
                        )
                        jobs = queued_jobs(conn, args.queue) if target is reqdrive else None
                        cell = to_cell(target.name, case, connections, result, jobs)
                        cells.append(cell)
                        print(f"  {format_cell(cell)}", flush=True)
            conn.flushdb()
        conn.close()
    return cells


@contextmanager
def probot_server(workdir: Path, skip: bool, setup: list[str]) -> Iterator[None]:
    """Install the pinned Probot into a temporary folder and run the minimal app from it."""
    if skip:
        yield
        return
    app_dir = workdir / "probot"
    shutil.copytree(PROBOT_APP, app_dir)
    subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=app_dir,
        check=True,
        timeout=300,
        stdout=subprocess.DEVNULL,
    )
    version = json.loads((app_dir / "node_modules" / "probot" / "package.json").read_text())
    setup.append(f"probot {version['version']} on node {node_version()}")
    print(setup[-1])
    env = {**os.environ, "PORT": str(PROBOT_PORT), "WEBHOOK_SECRET": SECRET}
    with running(f"node {shlex.quote(str(app_dir / 'index.js'))}", env, PROBOT_PORT,
                 workdir / "probot.log"):  # fmt: skip
        yield


def node_version() -> str:
    return subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()


def to_cell(
    target: str, case: str, connections: int, result: dict[str, float], jobs: int | None
) -> Cell:
    errors = sum(int(result[k]) for k in ("connect", "read", "write", "status", "timeout"))
    return Cell(
        target=target,
        case=case,
        connections=connections,
        requests=int(result["requests"]),
        seconds=result["duration_us"] / 1e6,
        p50_ms=result["p50_us"] / 1000,
        p99_ms=result["p99_us"] / 1000,
        errors=errors,
        jobs=jobs,
    )


def format_cell(cell: Cell) -> str:
    jobs = "" if cell.jobs is None else f", {cell.jobs} jobs queued"
    return (
        f"{cell.target:8} {cell.case:7} c={cell.connections:<3} {cell.rate:8.0f}/s "
        f"p50 {cell.p50_ms:6.2f} ms p99 {cell.p99_ms:6.2f} ms, {cell.errors} errors{jobs}"
    )


def table(cells: list[Cell]) -> str:
    """Markdown: one row per case and connection count, both servers and their ratios."""
    by_key = {(c.target, c.case, c.connections): c for c in cells}
    rows = [
        "| case | conns | reqdrive /s | p50 ms | p99 ms | Probot /s | p50 ms | p99 ms "
        "| rate ratio | p99 ratio | errors (r/P) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for case in ("trigger", "ignored"):
        for conns in sorted({c.connections for c in cells}):
            ours = by_key.get(("reqdrive", case, conns))
            theirs = by_key.get(("probot", case, conns))
            if ours is None:
                continue
            row = [
                case,
                str(conns),
                f"{ours.rate:,.0f}",
                f"{ours.p50_ms:.2f}",
                f"{ours.p99_ms:.2f}",
            ]
            if theirs is None:
                row += ["-"] * 5 + [f"{ours.errors}/-"]
            else:
                row += [
                    f"{theirs.rate:,.0f}",
                    f"{theirs.p50_ms:.2f}",
                    f"{theirs.p99_ms:.2f}",
                    f"{ours.rate / theirs.rate:.2f}" if theirs.rate else "-",
                    f"{ours.p99_ms / theirs.p99_ms:.2f}" if theirs.p99_ms else "-",
                    f"{ours.errors}/{theirs.errors}",
                ]
            rows.append("| " + " | ".join(row) + " |")
    return "\n".join(rows)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{os.cpu_count()} CPUs ({cpu}), {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, load average before the run {load}"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 s per cell, 1 and 16 conns")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per cell")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds first")
    parser.add_argument("--connections", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1, 16, 64], help="comma-separated, default 1,16,64")  # fmt: skip
    parser.add_argument("--web", help="web command instead of the Procfile's (binds $PORT)")
    parser.add_argument("--no-probot", action="store_true", help="measure reqdrive alone")
    parser.add_argument(
        "--same-issue",
        action="store_true",
        help="every trigger names the same issue (coalesces into one job)",
    )
    parser.add_argument("--queue", default="reqdrive", help="RQ queue to count jobs on")
    parser.add_argument("--json", type=Path, help="also write the cells here")
    parser.add_argument("--markdown", type=Path, help="also write the setup and table here")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.warmup, args.connections = 2.0, 1.0, [1, 16]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    for tool in ("wrk", *(() if args.no_probot else ("node", "npm"))):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (wrk: apt-get install wrk)")
    started = time.monotonic()
    setup = [
        f"machine: {machine()}",
        f"started {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
    ]
    print("\n".join(setup))
    trigger = "one issue number (coalesced)" if args.same_issue else "a new issue number each"
    setup.append(
        f"{args.seconds:g} s per cell after {args.warmup:g} s warm-up; triggers: {trigger}"
    )
    cells = measure(args, setup)
    print()
    print(table(cells))
    print(f"\n{time.monotonic() - started:.0f} s in all")
    if args.markdown:
        lines = [f"- {line}" for line in setup]
        args.markdown.write_text("\n".join([*lines, "", table(cells), ""]))
    if args.json:
        args.json.write_text(json.dumps([c.__dict__ for c in cells], indent=2))


if __name__ == "__main__":
    main()
