"""Slow clients on every server, baselines included (docs/contract.md,
"Slow clients"): an idle connection, a trickled head and a trickled body are closed by the
contract's deadlines, which `--client-timeout-s` shortens here to TIMEOUT_S; a trickle
does not reset them; an upgraded WebSocket is not cut; nothing is stored."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from harness.server_process import ServerProcess, start_server
from harness.services.sink_store import SinkStore
from servers import FRAMEWORKS, contract
from tests.helpers import (
    assert_still_serving,
    one_per_runtime,
    raw_ws_connect,
    require_framework,
    ws_frame,
)

TIMEOUT_S = 1.0
# A deadline may be checked by a periodic sweep and a whole-request deadline (Node's
# requestTimeout) covers head and body: a close is due by twice the timeout plus a sweep.
CLOSED_BY_S = 2 * TIMEOUT_S + 2.0
TRICKLE_INTERVAL_S = 0.2  # a byte this often: any per-read idle timer would never fire
WATCH_LIMIT_S = CLOSED_BY_S + 3.0  # how long a test waits before calling the server wrong


@pytest.fixture(scope="module", params=one_per_runtime(sorted(FRAMEWORKS)))
def server(request: pytest.FixtureRequest) -> Iterator[tuple[ServerProcess, SinkStore | None]]:
    """Each server with the deadlines at TIMEOUT_S, and a file sink where it serves /log
    (eventlet and node-express, whose deadlines are gevent's and node-http's code, in the
    slow run)."""
    require_framework(request.param)
    timeout_args = ["--client-timeout-s", str(TIMEOUT_S)]
    if not FRAMEWORKS[request.param].serves(contract.ROUTE_LOG):
        with start_server(request.param, extra_args=timeout_args) as server:
            yield server, None
        return
    with SinkStore("file") as store:
        server = start_server(
            request.param, sink="file", extra_args=[*store.server_args(), *timeout_args]
        )
        try:
            yield server, store
        finally:
            assert server.stop() == 0, server.stderr_tail()


def _connect(server: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=5)


def _seconds_until_closed(sock: socket.socket, trickle: bytes = b"") -> float:
    """Seconds until the server closes `sock` (EOF or reset), sending `trickle` a byte at a
    time meanwhile; whatever the server sends before closing (a 408) is read and dropped."""
    started = time.monotonic()
    sock.settimeout(TRICKLE_INTERVAL_S)
    remaining = trickle
    while time.monotonic() - started < WATCH_LIMIT_S:
        try:
            if remaining:
                sock.send(remaining[:1])
                remaining = remaining[1:]
            if not sock.recv(65536):
                return time.monotonic() - started
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - started
    pytest.fail(f"still open after {WATCH_LIMIT_S} s")


def _assert_closed_by_deadline(seconds: float) -> None:
    assert 0.8 * TIMEOUT_S <= seconds <= CLOSED_BY_S, f"closed after {seconds:.2f} s"


def test_a_connection_that_sends_nothing_is_closed(server) -> None:
    with _connect(server[0]) as sock:
        _assert_closed_by_deadline(_seconds_until_closed(sock))
    assert_still_serving(server[0])


def test_an_idle_keep_alive_connection_is_closed(server) -> None:
    with _connect(server[0]) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = b""
        while contract.TEXT_BODY not in reply:
            reply += sock.recv(65536)
        _assert_closed_by_deadline(_seconds_until_closed(sock))


def test_a_client_that_asks_within_the_deadline_keeps_its_connection(server) -> None:
    """Requests 0.6 timeouts apart, for several timeouts: the deadline restarts after each
    response, so a keep-alive client that keeps asking is never cut."""
    with _connect(server[0]) as sock:
        for _ in range(5):
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = b""
            while contract.TEXT_BODY not in reply:
                chunk = sock.recv(65536)
                assert chunk, "closed while the client kept asking"
                reply += chunk
            time.sleep(0.6 * TIMEOUT_S)


def test_a_head_trickled_after_a_response_is_closed_on_its_deadline(server) -> None:
    with _connect(server[0]) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = b""
        while contract.TEXT_BODY not in reply:
            reply += sock.recv(65536)
        endless_head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
        _assert_closed_by_deadline(_seconds_until_closed(sock, endless_head))


def test_a_trickled_head_is_closed_on_its_deadline(server) -> None:
    """A byte every TRICKLE_INTERVAL_S, a head longer than the deadline allows."""
    endless_head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
    with _connect(server[0]) as sock:
        _assert_closed_by_deadline(_seconds_until_closed(sock, endless_head))
    assert_still_serving(server[0])


def test_a_trickled_body_is_closed_on_its_deadline_and_stored_nowhere(server) -> None:
    server_process, store = server
    if store is None:
        pytest.skip(f"{server_process.framework} does not serve {contract.ROUTE_LOG}")
    body = b"b" * 200
    head = b"POST /log HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
    with _connect(server_process) as sock:
        sock.sendall(head)
        _assert_closed_by_deadline(_seconds_until_closed(sock, body))
    time.sleep(0.3)  # the file sink writes within 100 ms
    assert (store.count() or 0) == 0, store.records(5)
    assert_still_serving(server_process)


def test_a_body_trickled_to_a_route_that_ignores_it_is_closed_on_its_deadline(server) -> None:
    """GET / with a declared body sent a byte at a time: the reply may come at once, but
    the unread body does not hold the connection past its deadline (closing sooner, as
    nginx does once it has answered, is allowed)."""
    body = b"b" * 200
    head = b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
    with _connect(server[0]) as sock:
        sock.sendall(head)
        seconds = _seconds_until_closed(sock, body)
    assert seconds <= CLOSED_BY_S, f"closed after {seconds:.2f} s"
    assert_still_serving(server[0])


def test_an_idle_websocket_is_not_cut(server) -> None:
    server_process, _ = server
    if not FRAMEWORKS[server_process.framework].serves(contract.ROUTE_WEBSOCKET):
        pytest.skip(f"{server_process.framework} does not serve {contract.ROUTE_WEBSOCKET}")
    with raw_ws_connect(server_process.port) as sock:
        time.sleep(CLOSED_BY_S + 0.5)
        sock.sendall(ws_frame(0x9, b"still there?"))
        sock.settimeout(5)
        reply = sock.recv(65536)
    assert reply[:1] == b"\x8a", reply[:20]  # FIN + pong
    assert reply[2 : 2 + len(b"still there?")] == b"still there?"
