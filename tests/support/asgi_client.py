"""Requests to the web process's ASGI app in-process, as a server hands them over."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.web.asgi import WebhookASGI

CHUNK_BYTES = 64 * 1024  # how a chunked body arrives: in pieces, none of them announced
# How the client's side of a request ends: the whole body, a hang-up before its end, or a
# stall (the rest never comes, the connection stays open).
Ending = Literal["complete", "hang up", "stall"]


@dataclass
class Reply:
    """What the app answered: status, headers (lower-case names) and body."""

    status_code: int
    headers: dict[str, str] = field(default_factory=dict)
    data: bytes = b""

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    def get_json(self, silent: bool = False) -> Any:
        """The body as JSON; with `silent`, None when it is not JSON (an empty 204)."""
        try:
            return json.loads(self.data)
        except ValueError:
            if silent:
                return None
            raise

    def text(self) -> str:
        return self.data.decode()


class AsgiClient:
    """One request at a time through the app, each on an event loop of its own."""

    def __init__(self, app: WebhookASGI) -> None:
        self.app = app

    def get(self, path: str) -> Reply:
        return self.request("GET", path)

    def post(
        self,
        path: str,
        data: bytes = b"",
        headers: Mapping[str, str] | None = None,
        *,
        chunked: bool = False,
        ending: Ending = "complete",
    ) -> Reply:
        return self.request("POST", path, data, headers, chunked=chunked, ending=ending)

    def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        *,
        chunked: bool = False,
        ending: Ending = "complete",
    ) -> Reply:
        """One request; a Content-Length in `headers` is sent as given, else the body's own."""
        sent = {k.lower(): v for k, v in (headers or {}).items()}
        if chunked:
            sent["transfer-encoding"] = "chunked"
        elif method == "POST":
            sent.setdefault("content-length", str(len(body)))
        return asyncio.run(self._exchange(method, path, body, sent, chunked, ending))

    async def _exchange(
        self,
        method: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
        chunked: bool,
        ending: Ending,
    ) -> Reply:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()],
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 3000),
        }
        size = CHUNK_BYTES if chunked else max(len(body), 1)
        pieces = [body[i : i + size] for i in range(0, len(body), size)] or [b""]
        last = len(pieces) - 1 if ending == "complete" else len(pieces)
        messages: list[dict[str, Any]] = [
            {"type": "http.request", "body": piece, "more_body": i < last}
            for i, piece in enumerate(pieces)
        ]
        if ending == "hang up":
            messages.append({"type": "http.disconnect"})
        reply = Reply(0)

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop(0)
            await asyncio.Event().wait()  # as a server does: nothing more until the client acts
            raise AssertionError("unreachable")

        async def send(message: Any) -> None:
            if message["type"] == "http.response.start":
                reply.status_code = message["status"]
                reply.headers = {k.decode().lower(): v.decode() for k, v in message["headers"]}
            elif message["type"] == "http.response.body":
                reply.data += message.get("body", b"")

        await self.app(scope, receive, send)
        return reply
