"""Inside a sandbox without network: relay 127.0.0.1:PORT to the egress proxy, run the agent.

Started by bwrap as `python -I -S egress_relay.py PORT SOCKET -- AGENT ARGV...` with the
worker's interpreter, so it uses the standard library only and imports nothing of reqdrive.
It listens first, then starts the agent with its own standard streams and environment (which
point HTTPS_PROXY here), passes on the signals the worker sends, and exits as the agent did.
It enforces nothing: the proxy outside decides where a connection may go. Its start is on
every agent call's and check's path, so it imports only the C modules under the standard
library's wrappers (`_socket`, `_thread`, `_signal`): `socket`, `threading` and `signal` pull
in enum, selectors and collections, about 5 times the interpreter's own start (asyncio, more).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal's C half has no stub
import _socket
import _thread
import os
import sys

COPY_CHUNK = 64 * 1024
FORWARDED_SIGNALS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP)


def _copy(source: _socket.socket, target: _socket.socket) -> None:
    try:
        while chunk := source.recv(COPY_CHUNK):
            target.sendall(chunk)
        target.shutdown(_socket.SHUT_WR)
    except OSError:
        return


def _copy_back(source: _socket.socket, target: _socket.socket, done: _thread.LockType) -> None:
    try:
        _copy(source, target)
    finally:
        done.release()


def _relay(client: _socket.socket, socket_path: str) -> None:
    proxy = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        proxy.connect(socket_path)
        done = _thread.allocate_lock()
        done.acquire()
        _thread.start_new_thread(_copy_back, (proxy, client, done))
        _copy(client, proxy)
        done.acquire()  # the way back has ended too
    except (OSError, RuntimeError):  # RuntimeError: no thread for the way back
        return
    finally:
        proxy.close()
        client.close()


def _serve(listener: _socket.socket, socket_path: str) -> None:
    while True:
        # What socket.accept() wraps (typeshed leaves it out); the fd is close-on-exec.
        fd, _ = listener._accept()  # type: ignore[attr-defined]
        client = _socket.socket(listener.family, listener.type, fileno=fd)
        try:
            _thread.start_new_thread(_relay, (client, socket_path))
        except RuntimeError:  # no thread left (the sandbox's pids limit): this one is dropped
            client.close()


def _listen(port: int) -> _socket.socket:
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", port))
    listener.listen(_socket.SOMAXCONN)
    return listener


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
    try:
        os.kill(agent, number)
    except ProcessLookupError:  # it has ended already
        return


def main(args: list[str]) -> int:
    port, socket_path, separator, *argv = args
    if separator != "--" or not argv:
        print("usage: egress_relay.py PORT SOCKET -- ARGV...", file=sys.stderr)
        return 2
    listener = _listen(int(port))
    agent = _start(argv)
    for number in FORWARDED_SIGNALS:
        _signal.signal(number, lambda received, _frame: _pass_on(agent, received))
    _thread.start_new_thread(_serve, (listener, socket_path))
    _, status = os.waitpid(agent, 0)
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code  # killed by signal N: 128+N, as a shell says


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
