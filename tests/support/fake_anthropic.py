"""A scripted Anthropic Messages API on 127.0.0.1 that stands in for the model.

In-process (`fake_anthropic(script)`) for tests that call a runner themselves, or as a process
of its own (`python -m tests.support.fake_anthropic --script FILE --url-file FILE --journal
FILE`) for a deployed stack, whose workers reach it as they would reach the real API.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import re
import signal
import ssl
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any

MESSAGES_PATH = "/v1/messages"
MODEL = "claude-sonnet-4-5-20250929"
# Placeholders a scripted tool call may hold, filled from the request it answers: a deployed
# worker picks the worktree and the prd.json hand-over folder, so a script cannot know them.
CWD = "{cwd}"
PRD_PATH = "{prd_path}"
WORKING_DIRECTORY_RE = re.compile(r"Primary working directory: (\S+)")
PRD_PATH_RE = re.compile(r"^\s*(/\S*/prd\.json)\s*$", re.MULTILINE)
# The key the process form checks requests against, from its environment (not its argv).
API_KEY_VARIABLE = "FAKE_ANTHROPIC_API_KEY"
CREDENTIAL_HEADERS = ("x-api-key", "authorization")


@dataclass(frozen=True)
class ToolCall:
    """One tool_use block the model asks the CLI to run."""

    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class Usage:
    """The token counts a reply reports; the CLI sums them into its result line."""

    input_tokens: int = 100
    output_tokens: int = 20
    cache_read_tokens: int = 0


@dataclass(frozen=True)
class Turn:
    """One scripted model reply: text, tool calls, or a stall that never answers."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    stall: bool = False
    usage: Usage = Usage()
    error_status: int = 0  # answer with this HTTP error instead of a message


def say(text: str, usage: Usage = Usage()) -> Turn:
    return Turn(text=text, usage=usage)


def use(*calls: ToolCall, usage: Usage = Usage()) -> Turn:
    return Turn(tool_calls=calls, usage=usage)


def stall() -> Turn:
    return Turn(stall=True)


def fail(status: int) -> Turn:
    return Turn(error_status=status)


@dataclass(frozen=True)
class RecordedRequest:
    """What the CLI sent: enough to assert that the prompt and tool results arrived."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self.body.get("messages", [])
        return messages

    def prompt(self) -> str:
        """The last text block of the first user message, where the CLI puts the prompt."""
        texts = [b["text"] for b in _blocks(self.messages[0]) if b.get("type") == "text"]
        return texts[-1] if texts else ""

    def context_text(self) -> str:
        """Every text block of the first user message (2.1.329 puts the working directory here)."""
        return "\n".join(b["text"] for b in _blocks(self.messages[0]) if b.get("type") == "text")

    def system_text(self) -> str:
        system = self.body.get("system", "")
        if isinstance(system, str):
            return system
        return "\n".join(b.get("text", "") for b in system)

    def working_directory(self) -> str:
        """The CLI's working directory, which it states in its context text."""
        found = WORKING_DIRECTORY_RE.search(f"{self.system_text()}\n{self.context_text()}")
        return found.group(1) if found else ""

    def prd_path(self) -> str:
        """Where the planning prompt asks for prd.json ("" in a story's prompt)."""
        found = PRD_PATH_RE.search(self.prompt())
        return found.group(1) if found else ""

    def tool_results(self) -> list[dict[str, Any]]:
        """The tool_result blocks of the last user message."""
        return [b for b in _blocks(self.messages[-1]) if b.get("type") == "tool_result"]


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content", [])
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks: list[dict[str, Any]] = content
    return blocks


def tool_result_text(block: dict[str, Any]) -> str:
    """A tool_result's content as one string (the CLI sends a string or text blocks)."""
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text", "") for part in content)


def expand(turn: Turn, request: RecordedRequest) -> Turn:
    """The turn with {cwd} and {prd_path} in its tool calls' inputs filled from `request`."""
    if not turn.tool_calls:
        return turn
    values = {CWD: request.working_directory(), PRD_PATH: request.prd_path()}

    def fill(value: Any) -> Any:
        if isinstance(value, str):
            for placeholder, text in values.items():
                value = value.replace(placeholder, text)
        return value

    calls = tuple(
        ToolCall(c.name, {k: fill(v) for k, v in c.input.items()}) for c in turn.tool_calls
    )
    return dataclasses.replace(turn, tool_calls=calls)


def dump_script(script: Sequence[Turn]) -> str:
    """A script as JSON, for the process form's --script file."""
    return json.dumps([dataclasses.asdict(turn) for turn in script], indent=1)


def load_script(text: str) -> list[Turn]:
    turns = []
    for data in json.loads(text):
        calls = tuple(ToolCall(**call) for call in data.pop("tool_calls"))
        turns.append(Turn(tool_calls=calls, usage=Usage(**data.pop("usage")), **data))
    return turns


@dataclass
class FakeAnthropic:
    """The server's state: the script still to play and every request received."""

    script: list[Turn]
    url: str = ""
    api_key: str | None = None  # when set, any other key is answered 401 as the real API does
    journal: Path | None = None  # when set, each request is appended as a JSON line
    requests: list[RecordedRequest] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Condition = field(default_factory=threading.Condition)
    _ids: Iterator[int] = field(default_factory=itertools.count)

    def message_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.startswith(MESSAGES_PATH)]

    def wait_for_messages(self, count: int, timeout_s: float) -> bool:
        """Block until `count` message requests arrived; False if they did not in time."""
        with self._lock:
            return self._lock.wait_for(
                lambda: sum(r.path.startswith(MESSAGES_PATH) for r in self.requests) >= count,
                timeout_s,
            )

    def authorized(self, request: RecordedRequest) -> bool:
        if self.api_key is None:
            return True
        headers = {name.lower(): value for name, value in request.headers.items()}
        return headers.get("x-api-key") == self.api_key

    def _record(self, request: RecordedRequest) -> tuple[Turn, int]:
        with self._lock:
            self.requests.append(request)
            self._write_journal(request)
            self._lock.notify_all()
            # An exhausted script ends the conversation instead of hanging the CLI.
            turn = self.script.pop(0) if self.script else say("(script exhausted)")
            return turn, next(self._ids)

    def _write_journal(self, request: RecordedRequest) -> None:
        """One JSON line per request, credentials left out: whether the key matched instead."""
        if self.journal is None:
            return
        headers = {
            name: value
            for name, value in request.headers.items()
            if name.lower() not in CREDENTIAL_HEADERS
        }
        entry = {**dataclasses.asdict(request), "headers": headers}
        entry["authorized"] = self.authorized(request)
        with self.journal.open("a") as journal:
            journal.write(json.dumps(entry) + "\n")


def read_journal(path: Path) -> list[RecordedRequest]:
    """The requests a process-form server wrote to its journal (credential headers removed)."""
    lines = path.read_text().splitlines() if path.exists() else []
    entries = [json.loads(line) for line in lines]
    return [RecordedRequest(e["method"], e["path"], e["headers"], e["body"]) for e in entries]


def sse_events(turn: Turn, number: int, model: str) -> list[tuple[str, dict[str, Any]]]:
    """The event sequence the CLI needs; a message id repeated across replies makes it loop."""
    usage_start = {
        "input_tokens": turn.usage.input_tokens,
        "output_tokens": 1,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": turn.usage.cache_read_tokens,
    }
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": f"msg_fake{number:06d}",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": usage_start,
                },
            },
        )
    ]
    index = 0
    if turn.text:
        events += _block_events(index, {"type": "text", "text": ""}, "text_delta", turn.text)
        index += 1
    for call_number, call in enumerate(turn.tool_calls):
        start = {
            "type": "tool_use",
            "id": f"toolu_fake{number:04d}{call_number:02d}",
            "name": call.name,
            "input": {},
        }
        events += _block_events(index, start, "input_json_delta", json.dumps(call.input))
        index += 1
    stop_reason = "tool_use" if turn.tool_calls else "end_turn"
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": turn.usage.output_tokens},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _block_events(
    index: int, start: dict[str, Any], delta_type: str, payload: str
) -> list[tuple[str, dict[str, Any]]]:
    # Split the payload in two deltas so the CLI has to join partial pieces, as with the real API.
    half = len(payload) // 2
    key = "text" if delta_type == "text_delta" else "partial_json"
    deltas = [
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": index, "delta": {"type": delta_type, key: p}},
        )
        for p in (payload[:half], payload[half:])
        if p
    ]
    return [
        (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        ),
        *deltas,
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def _error_body(status: int) -> bytes:
    kind = {401: "authentication_error", 429: "rate_limit_error", 529: "overloaded_error"}
    error = {"type": kind.get(status, "api_error"), "message": f"scripted error {status}"}
    return json.dumps({"type": "error", "error": error}).encode()


def _handler(state: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            body = json.loads(raw) if raw else {}
            request = RecordedRequest("POST", self.path, dict(self.headers.items()), body)
            if not self.path.startswith(MESSAGES_PATH):
                state._record(request)
                self._send(404, "application/json", b'{"type":"error"}')
                return
            if not state.authorized(request):
                state._record(request)
                self._send(401, "application/json", _error_body(401))
                return
            turn, number = state._record(request)
            turn = expand(turn, request)
            if turn.stall:
                # Hold the connection open until the test ends: the CLI waits for a reply.
                state.released.wait()
                return
            if turn.error_status:
                self._send(turn.error_status, "application/json", _error_body(turn.error_status))
                return
            model = str(body.get("model", MODEL))
            payload = "".join(
                f"event: {name}\ndata: {json.dumps(data)}\n\n"
                for name, data in sse_events(turn, number, model)
            )
            self._send(200, "text/event-stream", payload.encode())

        def do_GET(self) -> None:
            state._record(RecordedRequest("GET", self.path, dict(self.headers.items()), {}))
            self._send(404, "application/json", b'{"type":"error"}')

        def _send(self, status: int, content_type: str, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("request-id", "req_fake")
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the recorded requests are what tests look at."""

    return Handler


def _server(state: FakeAnthropic) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    return server


@contextmanager
def fake_anthropic(
    script: Sequence[Turn], tls: ssl.SSLContext | None = None
) -> Iterator[FakeAnthropic]:
    """Serve the script on an ephemeral 127.0.0.1 port for the duration of the block; with a
    TLS context, over HTTPS as `https://localhost:<port>` (the context's certificate names it)."""
    state = FakeAnthropic(script=list(script))
    server = _server(state)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
        state.url = f"https://localhost:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.released.set()
        server.shutdown()
        server.server_close()
        thread.join()


def main(argv: Sequence[str] | None = None) -> None:
    """Serve a script file until SIGTERM; write the URL to --url-file once it answers."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.fake_anthropic")
    parser.add_argument("--script", type=Path, required=True)
    parser.add_argument("--url-file", type=Path, required=True)
    parser.add_argument("--journal", type=Path, required=True)
    args = parser.parse_args(argv)
    state = FakeAnthropic(
        script=load_script(args.script.read_text()),
        api_key=os.environ.get(API_KEY_VARIABLE),
        journal=args.journal,
    )
    server = _server(state)

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    # Written whole under another name, then renamed: a reader never sees half a URL.
    partial = args.url_file.with_suffix(".partial")
    partial.write_text(state.url)
    partial.replace(args.url_file)
    try:
        server.serve_forever()
    finally:
        state.released.set()
        server.server_close()


if __name__ == "__main__":
    main(sys.argv[1:])
