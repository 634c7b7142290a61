"""Inside a sandbox without network: relay 127.0.0.1:PORT to the egress proxy, run the agent.

Started by bwrap as `python -I -S egress_relay.py PORT SOCKET -- AGENT ARGV...` with the
worker's interpreter, so it uses the standard library only and imports nothing of reqdrive.
It listens first, then starts the agent with its own standard streams and environment (which
point HTTPS_PROXY here), passes on the signals the worker sends, and exits as the agent did.
It enforces nothing: the proxy outside decides where a connection may go.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys

COPY_CHUNK = 64 * 1024
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while chunk := await reader.read(COPY_CHUNK):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()


async def _relay(
    socket_path: str, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
) -> None:
    try:
        proxy_reader, proxy_writer = await asyncio.open_unix_connection(socket_path)
    except OSError:
        client_writer.close()
        return
    await asyncio.gather(_copy(client_reader, proxy_writer), _copy(proxy_reader, client_writer))
    proxy_writer.close()
    client_writer.close()


async def _main(port: int, socket_path: str, argv: list[str]) -> int:
    server = await asyncio.start_server(
        lambda r, w: _relay(socket_path, r, w), "127.0.0.1", port, reuse_address=True
    )
    try:
        agent = await asyncio.create_subprocess_exec(*argv)
    except OSError as error:
        print(f"[reqdrive] cannot start {argv[0]}: {error}", file=sys.stderr)
        return 127
    loop = asyncio.get_running_loop()
    for number in FORWARDED_SIGNALS:
        loop.add_signal_handler(number, agent.send_signal, number)
    code = await agent.wait()
    server.close()
    return code if code >= 0 else 128 - code  # killed by signal N: 128+N, as a shell says


def main(args: list[str]) -> int:
    port, socket_path, separator, *argv = args
    if separator != "--" or not argv:
        print("usage: egress_relay.py PORT SOCKET -- ARGV...", file=sys.stderr)
        return 2
    return asyncio.run(_main(int(port), socket_path, argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
