"""The RFC 6455 rules of servers/core/websocket.py, without a socket."""

from __future__ import annotations

import sys

import pytest

from servers import contract
from servers.core.websocket import (
    WS_LINGER_MAX_BYTES,
    WS_LINGER_S,
    ClientFrameWatch,
    LingerDrain,
    frame_header_error,
    peer_close_code_valid,
    websocket_close_code,
)
from tests.helpers import ws_frame


@pytest.mark.parametrize(("code", "valid"), [(1000, True), (1001, True), (1007, True),
    (1013, True), (3000, True), (4999, True), (999, False), (1004, False), (1005, False),
    (1006, False), (1015, False), (2000, False), (5000, False), (0, False)])  # fmt: skip
def test_close_codes_a_peer_may_send(code: int, valid: bool) -> None:
    assert peer_close_code_valid(code) is valid


# Found by the fuzz suite (tests/e2e/test_fuzz.py): NaN was stored as JSON, 5,000 digits
# were refused, and 5,000 levels of nesting raised RecursionError out of the handler (the
# connection dropped without a close frame); the Node servers' JSON.parse judged all three.
@pytest.mark.parametrize(("message", "code"), [('{"a": 1}', None), (' {"a": [1, {}]}\n', None),
    ('{"a": NaN}', 1007), ('{"a": -Infinity}', 1007), ('{"a": ' + "1" * 5000 + "}", None),
    ("[" * 5000 + "]" * 5000, 1007), ('{"a": ' + "[" * 5000 + "]" * 5000 + "}", 1007),
    ("[1]", 1007), ("", 1007), (b"{}", contract.WS_CLOSE_UNSUPPORTED_DATA)])  # fmt: skip
def test_the_close_code_a_message_earns(message: str | bytes, code: int | None) -> None:
    # judged at the servers' own recursion limit (CPython's default): a test runner may
    # have raised this process's (Hypothesis does, for its own search)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        assert websocket_close_code(message) == code
    finally:
        sys.setrecursionlimit(limit)


# (first two bytes of a client frame, inside a fragmented message?) -> refused?
@pytest.mark.parametrize(("header", "inside", "refused"), [
    (ws_frame(0x1, b"x")[:2], False, False), (ws_frame(0x1, b"x", fin=False)[:2], False, False),
    (ws_frame(0x0, b"x")[:2], True, False), (ws_frame(0x9, b"p" * 125)[:2], True, False),
    (ws_frame(0x8, b"")[:2], False, False),
    (ws_frame(0x2, b"", declared_length=2**31)[:2], False, False),
    (ws_frame(0x1, b"x", mask=False)[:2], False, True),
    (ws_frame(0x1, b"x", rsv=4)[:2], False, True),
    (ws_frame(0x3, b"x")[:2], False, True), (ws_frame(0xB, b"x")[:2], False, True),
    (ws_frame(0x9, b"p", fin=False)[:2], False, True), (ws_frame(0xA, b"p" * 126)[:2], False, True),
    (ws_frame(0x0, b"x")[:2], False, True), (ws_frame(0x1, b"x")[:2], True, True)])  # fmt: skip
def test_broken_framing_is_found_in_a_frames_first_two_bytes(
    header: bytes, inside: bool, refused: bool
) -> None:
    assert (frame_header_error(header, inside) is not None) is refused


def test_the_watch_finds_an_unmasked_frame_wherever_the_stream_splits() -> None:
    masked = b"".join(
        ws_frame(0x1, b"x" * size) for size in (0, 5, 125, 126, 300, 70_000)
    ) + ws_frame(0x9, b"ping")
    stream = masked + ws_frame(0x1, b"bare", mask=False)
    for chunk_bytes in (1, 2, 3, 7, 13, 1000, len(stream)):
        watch = ClientFrameWatch()
        results = [
            watch.feed(stream[i : i + chunk_bytes]) for i in range(0, len(stream), chunk_bytes)
        ]
        # found in the chunk holding the bare frame's second byte (mask bit and length)
        assert results.index(False) == (len(masked) + 1) // chunk_bytes


def test_the_watch_tells_when_a_close_frame_has_come_whole() -> None:
    close = ws_frame(0x8, (1000).to_bytes(2) + b"bye")
    stream = ws_frame(0x1, b"x" * 300) + close
    for chunk_bytes in (1, 2, 3, 7, 13, 1000, len(stream)):
        watch = ClientFrameWatch()
        starts = range(0, len(stream), chunk_bytes)
        came = [watch.feed(stream[i : i + chunk_bytes]) and watch.close_came for i in starts]
        # in the chunk holding the close frame's last byte, not before
        assert came.index(True) == (len(stream) - 1) // chunk_bytes
    empty_close, text = ClientFrameWatch(), ClientFrameWatch()
    assert empty_close.feed(ws_frame(0x8)) and empty_close.close_came  # whole at its header
    assert text.feed(ws_frame(0x1, b"abc")) and not text.close_came


def test_a_header_declaring_more_than_the_limit_closes_1009_before_the_payload() -> None:
    from wsproto.connection import Connection, ConnectionType
    from wsproto.events import CloseConnection

    from servers.runtimes.green.app import DeclaredSizeLimit

    ws = Connection(ConnectionType.SERVER, extensions=[DeclaredSizeLimit()])
    ws.receive_data(ws_frame(0x1, b"", declared_length=2**31))
    [event] = ws.events()
    assert isinstance(event, CloseConnection) and event.code == 1009


def test_a_linger_ends_once_enough_was_dropped_or_its_time_is_up() -> None:
    linger = LingerDrain(started_s=100.0)
    assert linger.drop(WS_LINGER_MAX_BYTES - 1)
    assert not linger.drop(1)
    assert linger.remaining_s(100.0) == WS_LINGER_S
    assert linger.remaining_s(100.0 + WS_LINGER_S) <= 0
