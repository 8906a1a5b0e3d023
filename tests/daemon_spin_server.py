"""A server whose work is done by a daemon outside its process group and process tree:
at start it double-forks a helper that calls setsid (its parent then exits, so the helper
is nobody's child here), and every `GET /` is answered only after that helper has done a
fixed amount of CPU work (`--spin N` iterations, as tests/spin_server.py) for it over a
socket pair. A process-tree reading of the server's CPU misses the helper; its cgroup
counts it. Standard library only, one asyncio process plus the helper.

    python tests/daemon_spin_server.py --host 127.0.0.1 --port 8080 --spin 20000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket

from spin_server import OK, GetProtocol, spin  # beside this file: the same answers and work


def start_helper(iterations: int) -> socket.socket:
    """The helper, double-forked and in a session of its own; the server's end of the
    pair that reaches it (one byte asks for one spin, one byte back says it is done)."""
    server_end, helper_end = socket.socketpair()
    first = os.fork()
    if first == 0:  # the intermediate child: a new session, fork, exit
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        server_end.close()
        while helper_end.recv(1):  # the server gone: the pair closes, the helper ends
            spin(iterations)
            helper_end.sendall(b"d")
        os._exit(0)
    os.waitpid(first, 0)  # the helper is reparented away: outside this process's tree
    helper_end.close()
    server_end.setblocking(False)
    return server_end


class DaemonProtocol(GetProtocol):
    """`GET /` answered once the helper has done its work for it."""

    def __init__(self, requests: asyncio.Queue[asyncio.Future[None]]) -> None:
        super().__init__()
        self.requests = requests

    def answer(self) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.add_done_callback(self.reply)
        self.requests.put_nowait(done)

    def reply(self, _: asyncio.Future[None]) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(OK)


async def relay(helper: socket.socket, requests: asyncio.Queue[asyncio.Future[None]]) -> None:
    """One request at a time to the helper, in order."""
    loop = asyncio.get_running_loop()
    while True:
        done = await requests.get()
        await loop.sock_sendall(helper, b"s")
        await loop.sock_recv(helper, 1)
        done.set_result(None)


async def serve(host: str, port: int, iterations: int) -> None:
    helper = start_helper(iterations)
    requests: asyncio.Queue[asyncio.Future[None]] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    relaying = loop.create_task(relay(helper, requests))
    server = await loop.create_server(lambda: DaemonProtocol(requests), host, port, backlog=4096)
    async with server:
        await server.serve_forever()
    relaying.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--spin", type=int, default=0, help="helper loop iterations per GET /")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, args.spin))


if __name__ == "__main__":
    main()
