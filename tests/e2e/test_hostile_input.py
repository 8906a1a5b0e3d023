"""Hostile input on every server that serves `/log` (docs/contract.md, "Hostile input"):
smuggling attempts, truncated bodies and bodies over the limit are refused and never
become a record. The request-level refusals are verify's malformed list, run on every
server by test_conformance; here the sink is watched too."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from harness.server_process import ServerProcess, start_server
from harness.services.sink_store import SinkStore
from harness.verify import _responses, _status_of, read_until_close
from servers import contract
from tests.helpers import assert_still_serving, require_framework, servers_serving

LOG_SERVERS = servers_serving(contract.ROUTE_LOG)
# A second /log request hidden in the first one's body: answered, it would be a record.
HIDDEN = b"POST /log HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
SMUGGLING = {
    "transfer-encoding-xchunked": b"POST /log HTTP/1.1\r\nHost: x\r\n"
    b"Transfer-Encoding: xchunked\r\n\r\n" + HIDDEN,
    "content-length-twice": b"POST /log HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
    b"Content-Length: %d\r\n\r\n" % len(HIDDEN) + HIDDEN,
    "content-length-plus": b"POST /log HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\nabc",
    "content-length-and-chunked": b"POST /log HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + HIDDEN,
    "nul-in-header": b"POST /log HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n"
    b"Content-Length: 3\r\n\r\nabc",
}
TOO_LARGE_BYTES = 2 * contract.LOG_MAX_BODY_BYTES


@pytest.fixture(scope="module", params=LOG_SERVERS)
def log_server(request: pytest.FixtureRequest) -> Iterator[tuple[ServerProcess, SinkStore]]:
    """Each /log server with a file sink, whose records the tests count."""
    require_framework(request.param)
    with SinkStore("file") as store:
        server = start_server(request.param, sink="file", extra_args=store.server_args())
        try:
            yield server, store
        finally:
            assert server.stop() == 0, server.stderr_tail()


def _connect(server: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=5)


def _read_until_close(sock: socket.socket, quiet_s: float = 2.0) -> bytes:
    sock.settimeout(quiet_s)
    return read_until_close(sock)


def _nothing_stored(store: SinkStore) -> None:
    time.sleep(0.3)  # the file sink writes within 100 ms
    assert (store.count() or 0) == 0, store.records(5)


@pytest.mark.parametrize("case", sorted(SMUGGLING))
def test_smuggling_gets_one_refusal_and_no_record(log_server, case: str) -> None:
    server, store = log_server
    with _connect(server) as sock:
        sock.sendall(SMUGGLING[case])
        reply = _read_until_close(sock)
    assert _status_of(reply) in (400, 501), reply[:80]
    assert _responses(reply) == 1, reply
    _nothing_stored(store)
    assert_still_serving(server)


def test_a_truncated_body_is_no_record(log_server) -> None:
    """Content-Length 100, 3 bytes, then the client half-closes: 400 or a close."""
    server, store = log_server
    with _connect(server) as sock:
        sock.sendall(b"POST /log HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
        sock.shutdown(socket.SHUT_WR)
        reply = _read_until_close(sock, quiet_s=5.0)
    assert reply == b"" or _status_of(reply) == 400, reply[:80]
    _nothing_stored(store)
    assert_still_serving(server)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_over_the_limit_is_413(log_server, chunked: bool) -> None:
    server, store = log_server
    body = b"x" * TOO_LARGE_BYTES
    if chunked:
        framing = b"Transfer-Encoding: chunked"
        piece = 64 * 1024
        payload = b"".join(
            b"%x\r\n%s\r\n" % (piece, body[i : i + piece]) for i in range(0, len(body), piece)
        )
        payload += b"0\r\n\r\n"
    else:
        framing = b"Content-Length: %d" % len(body)
        payload = body
    with _connect(server) as sock:
        sock.sendall(b"POST /log HTTP/1.1\r\nHost: x\r\n" + framing + b"\r\n\r\n")

        def send_body() -> None:
            # refused and closed before all of it went out: as it may be
            with contextlib.suppress(OSError):
                sock.sendall(payload)

        sender = threading.Thread(target=send_body, daemon=True)
        sender.start()
        reply = _read_until_close(sock, quiet_s=5.0)
        sender.join(5)
    assert _status_of(reply) == 413, reply[:80]
    _nothing_stored(store)
    assert_still_serving(server)


def test_a_declared_2_gib_body_is_refused_at_once(log_server) -> None:
    server, store = log_server
    started = time.monotonic()
    with _connect(server) as sock:
        sock.sendall(b"POST /log HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % 2**31)
        sock.settimeout(5)
        reply = sock.recv(65536)
    assert _status_of(reply) == 413, reply[:80]
    assert time.monotonic() - started < 2.0
    _nothing_stored(store)
    assert_still_serving(server)
