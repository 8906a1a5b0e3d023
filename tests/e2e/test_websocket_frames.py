"""RFC 6455 frames no client library sends, and a peer that does not read, on every server
serving /ws, baselines included. verify's `ws-raw-frames` check (run
by test_conformance) sees the close codes; these see the counters and the memory."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from harness.server_process import ServerProcess, start_server
from harness.verify import RAW_FRAME_CASES
from servers import contract
from tests.helpers import (
    assert_still_serving,
    one_per_runtime,
    raw_ws_close_code,
    raw_ws_connect,
    require_framework,
    servers_serving,
    ws_frame,
)

WS_SERVERS = servers_serving(contract.ROUTE_WEBSOCKET)
FLOOD_BYTES = 48 * 1024 * 1024  # of pings, from a client that never reads a pong
FLOOD_GROWTH_LIMIT_BYTES = 24 * 1024 * 1024  # what the server's RSS may grow by meanwhile


@pytest.fixture(scope="module", params=one_per_runtime(WS_SERVERS))
def ws_server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    require_framework(request.param)
    with start_server(request.param) as server:
        yield server


def latest(server: ServerProcess, field: str) -> int:
    return int(server.telemetry_lines()[-1][field])


@pytest.mark.parametrize("what", list(RAW_FRAME_CASES))
def test_a_refused_frame_closes_with_its_code(ws_server: ServerProcess, what: str) -> None:
    frame, code = RAW_FRAME_CASES[what]
    with raw_ws_connect(ws_server.port) as sock:
        sock.sendall(frame)
        assert raw_ws_close_code(sock) == code
    assert_still_serving(ws_server)


def test_every_refused_frame_counts_as_bad(ws_server: ServerProcess) -> None:
    """Each refused frame, on a connection of its own, adds one to the telemetry's `bad`:
    one wait for the once-a-second line covers them all (a wait per frame cost 45 s)."""
    bad_before = latest(ws_server, "bad")
    for what, (frame, code) in RAW_FRAME_CASES.items():
        with raw_ws_connect(ws_server.port) as sock:
            sock.sendall(frame)
            assert raw_ws_close_code(sock) == code, what
    counted = len(RAW_FRAME_CASES)
    line = ws_server.wait_telemetry(lambda t: t["bad"] >= bad_before + counted)
    assert line, f"counted {latest(ws_server, 'bad') - bad_before} of {counted} refused frames"


def test_frames_sent_with_the_handshake_are_not_lost(ws_server: ServerProcess) -> None:
    """A client that sends a frame in the same write as its upgrade request (RFC 6455 says
    it should wait for the 101; nothing stops it): the server's HTTP parser may buffer the
    frame, and the session must still get it (the green servers hand it over explicitly)."""
    upgrade = (
        f"GET {contract.ROUTE_WEBSOCKET} HTTP/1.1\r\nHost: 127.0.0.1:{ws_server.port}\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        f"Origin: {contract.WS_ORIGIN}\r\nSec-WebSocket-Protocol: {contract.WS_SUBPROTOCOL}\r\n"
        "\r\n"
    ).encode()
    if ws_server.framework == "twisted":
        pytest.xfail("twisted's server drops a frame sent with the upgrade request")
    close_frame = ws_frame(0x8, contract.WS_CLOSE_NORMAL.to_bytes(2))
    with socket.create_connection(("127.0.0.1", ws_server.port), timeout=5.0) as sock:
        sock.sendall(upgrade + close_frame)
        head = b""
        while not head.endswith(b"\r\n\r\n"):  # a byte at a time: the frames stay unread
            byte = sock.recv(1)
            assert byte, f"closed during the handshake, after {head!r}"
            head += byte
        assert head.startswith(b"HTTP/1.1 101"), head
        assert raw_ws_close_code(sock) == contract.WS_CLOSE_NORMAL
    assert_still_serving(ws_server)


def test_a_ping_flood_from_a_peer_that_never_reads_costs_bounded_memory(
    ws_server: ServerProcess,
) -> None:
    rss_before = latest(ws_server, "rss_bytes")
    pings = ws_frame(0x9, b"p" * 125) * 8192  # 1 MiB of pings a send
    sent = 0
    with raw_ws_connect(ws_server.port) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.settimeout(3.0)
        try:
            while sent < FLOOD_BYTES:
                sock.sendall(pings)
                sent += len(pings)
        except TimeoutError:
            pass  # the server stopped reading: backpressure
        except (ConnectionResetError, BrokenPipeError):
            pass  # the server dropped the flooding peer (node's ws: too many pongs pending)
        flood_end = time.time()
        line = ws_server.wait_telemetry(lambda t: t["t"] > flood_end + 0.5)
        assert line is not None
        growth = line["rss_bytes"] - rss_before
    assert growth < FLOOD_GROWTH_LIMIT_BYTES, (
        f"RSS grew {growth / 2**20:.0f} MiB after {sent / 2**20:.0f} MiB of pings"
    )
    assert_still_serving(ws_server)
