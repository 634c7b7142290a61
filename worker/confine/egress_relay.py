"""Inside a sandbox without network: relay 127.0.0.1:PORT to the egress proxy, run the agent.

Started by bwrap as `python -I -S egress_relay.py PORT SOCKET -- AGENT ARGV...` with the
worker's interpreter, so it uses the standard library only and imports nothing of reqdrive.
It listens first, then starts the agent with its own standard streams and environment (which
point HTTPS_PROXY here), passes on the signals the worker sends, and exits as the agent did.
It enforces nothing: the proxy outside decides where a connection may go. Threads and plain
sockets rather than asyncio: importing asyncio would add about 60 ms to every agent call.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading

COPY_CHUNK = 64 * 1024
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _copy(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(COPY_CHUNK):
            target.sendall(chunk)
        target.shutdown(socket.SHUT_WR)
    except OSError:
        return


def _relay(client: socket.socket, socket_path: str) -> None:
    with client, socket.socket(socket.AF_UNIX) as proxy:
        try:
            proxy.connect(socket_path)
        except OSError:
            return
        back = threading.Thread(target=_copy, args=(proxy, client), daemon=True)
        back.start()
        _copy(client, proxy)
        back.join()


def _serve(listener: socket.socket, socket_path: str) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_relay, args=(client, socket_path), daemon=True).start()


def _start(argv: list[str]) -> int:
    """Fork and exec the agent (the listener is close-on-exec, so it does not inherit it)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(argv[0], argv)  # noqa: S606 - the agent argv, as bwrap would start it
        except OSError as error:
            print(f"[reqdrive] cannot start {argv[0]}: {error}", file=sys.stderr, flush=True)
        os._exit(127)
    return pid


def _pass_on(agent: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it has ended already
        os.kill(agent, number)


def main(args: list[str]) -> int:
    port, socket_path, separator, *argv = args
    if separator != "--" or not argv:
        print("usage: egress_relay.py PORT SOCKET -- ARGV...", file=sys.stderr)
        return 2
    listener = socket.create_server(("127.0.0.1", int(port)))
    agent = _start(argv)
    for number in FORWARDED_SIGNALS:
        signal.signal(number, lambda received, _frame: _pass_on(agent, received))
    threading.Thread(target=_serve, args=(listener, socket_path), daemon=True).start()
    _, status = os.waitpid(agent, 0)
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code  # killed by signal N: 128+N, as a shell says


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
