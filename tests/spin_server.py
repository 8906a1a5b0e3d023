"""A tiny HTTP/1.1 server for tests that need a server of known cost: `GET /` answers the
contract's text, after a fixed amount of CPU work (`--spin N`: N iterations of a loop),
so that two of them differ by exactly the work one adds; `--leak N` keeps N bytes per
request for good (a server whose memory grows with its load). Every other request is
answered 404 and its connection closed. Standard library only (asyncio), one process.

    python tests/spin_server.py --host 127.0.0.1 --port 8080 --spin 20000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

TEXT_BODY = b"I am a stupid HTTP server!"  # servers.contract.TEXT_BODY
OK = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(TEXT_BODY)
    + TEXT_BODY
)
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def spin(iterations: int) -> None:
    """A fixed amount of CPU work: the same count costs the same on one machine."""
    total = 0
    for i in range(iterations):
        total += i


KEPT: list[bytes] = []  # what --leak holds on to


class GetProtocol(asyncio.Protocol):
    """Requests split at their blank line: `GET /` goes to `answer`, anything else is 404
    and a close (tests/daemon_spin_server.py answers the same way)."""

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
            if not head.startswith(b"GET / "):
                self.transport.write(NOT_FOUND)
                self.transport.close()
                return
            self.answer()

    def answer(self) -> None:
        raise NotImplementedError


class SpinProtocol(GetProtocol):
    def __init__(self, iterations: int, leak_bytes: int = 0) -> None:
        super().__init__()
        self.iterations = iterations
        self.leak_bytes = leak_bytes

    def answer(self) -> None:
        assert self.transport is not None
        spin(self.iterations)
        if self.leak_bytes:
            KEPT.append(b"x" * self.leak_bytes)  # written, so its pages are charged
        self.transport.write(OK)


async def serve(host: str, port: int, iterations: int, leak_bytes: int = 0) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SpinProtocol(iterations, leak_bytes), host, port, backlog=4096
    )
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--spin", type=int, default=0, help="loop iterations per GET /")
    parser.add_argument("--leak", type=int, default=0, help="bytes kept for good per GET /")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, args.spin, args.leak))


if __name__ == "__main__":
    main()
