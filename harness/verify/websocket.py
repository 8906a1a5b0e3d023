"""The WebSocket route's checks: the handshake and its refusals, the contract's close
codes, and raw frames (RFC 6455 §5.2) that no well-behaved client library sends."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from harness.verify.endpoint import CheckFunction, EndpointOrUrl, endpoint_of, open_connection
from harness.verify.failure import excerpt, expect, fail
from harness.verify.severity import Outcome, judge_rule, with_deviations
from harness.verify.wire import expect_still_serving
from servers import contract


def ws_url(server: EndpointOrUrl) -> str:
    """The `/ws` URL of the server (wss:// over TLS)."""
    base_url = endpoint_of(server).base_url
    return base_url.replace("http", "ws", 1) + contract.ROUTE_WEBSOCKET


# How long the client's reader may wait inside one TLS record. websockets 17.4's sync
# client reads its socket with no timeout and, when a handshake fails, joins its reader
# thread: a reader blocked in the middle of a TLS record (readable by select, the rest of
# the record never sent) then holds the check forever (seen in CI: uvicorn over h1-tls,
# `ws-subprotocol`, 300 s until pytest's timeout). The socket is ours, with this timeout.
WS_SOCKET_TIMEOUT_S = 10.0


class OneThreadAtATimeTLS:
    """A TLS socket for websockets' sync client, whose calls into OpenSSL take turns and
    never hold their turn across a wait on the network.

    That client reads in a thread of its own while the caller's thread writes, and an
    OpenSSL connection may not be used by two threads at once (CPython 3.11 does not
    serialise them). Over TLS 1.3 the server's session tickets come after the handshake:
    when the reader took them while the upgrade request was being written, the reader's
    `recv` waited inside OpenSSL for application data, and the request never went out
    (eventlet over h1-tls, `ws-handshake` after `malformed`: about 1 handshake in 600; the
    client's TCP `bytes_sent` ended with its TLS Finished; seen in CI). Here the socket is
    non-blocking: each call runs under one lock, and a call OpenSSL cannot finish yet
    waits for the socket outside the lock, up to the timeout websockets (or ws_connect)
    set.
    """

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self._sock = sock
        self._timeout_s = sock.gettimeout()
        self._turn = threading.Lock()
        sock.setblocking(False)

    def settimeout(self, timeout_s: float | None) -> None:
        self._timeout_s = timeout_s

    def gettimeout(self) -> float | None:
        return self._timeout_s

    def recv(self, size: int) -> bytes:
        return self._in_turn(lambda: self._sock.recv(size))

    def send(self, data: bytes) -> int:
        return self._in_turn(lambda: self._sock.send(data))

    def sendall(self, data: bytes) -> None:
        with memoryview(data) as view:
            sent = 0
            while sent < len(view):
                sent += self.send(view[sent:])

    def _in_turn(self, call: Callable[[], Any]) -> Any:
        deadline = None if self._timeout_s is None else time.monotonic() + self._timeout_s
        while True:
            with self._turn:
                try:
                    return call()
                except ssl.SSLWantReadError:
                    events = selectors.EVENT_READ
                except ssl.SSLWantWriteError:
                    events = selectors.EVENT_WRITE
            remaining_s = None if deadline is None else max(0.0, deadline - time.monotonic())
            with selectors.DefaultSelector() as selector:
                selector.register(self._sock, events)
                if not selector.select(remaining_s):
                    raise TimeoutError("timed out")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def ws_connect(
    server: EndpointOrUrl,
    origin: str | None = contract.WS_ORIGIN,
    subprotocols: tuple[str, ...] = (contract.WS_SUBPROTOCOL,),
) -> ClientConnection:
    """A WebSocket client connection to `/ws` (the contract's Origin and subprotocol), on
    a socket from the one connection factory (TLS done there for the TLS protocols), so
    no read of it blocks longer than WS_SOCKET_TIMEOUT_S."""
    endpoint = endpoint_of(server)
    sock = open_connection(endpoint, WS_SOCKET_TIMEOUT_S)
    if isinstance(sock, ssl.SSLSocket):
        sock = OneThreadAtATimeTLS(sock)  # type: ignore[assignment]
    try:
        return connect(
            # ws://: the socket given is already TLS where the case is; the library
            # would wrap it a second time for wss://
            "ws" + ws_url(endpoint).removeprefix("wss").removeprefix("ws"),
            sock=sock,
            origin=origin,  # type: ignore[arg-type]
            subprotocols=list(subprotocols),  # type: ignore[arg-type]
            compression=None,
            max_size=None,
            open_timeout=5,
            proxy=None,
        )
    except BaseException:
        sock.close()
        raise


HANDSHAKE_SENT = (
    f"a /ws handshake (Origin {contract.WS_ORIGIN}, subprotocol {contract.WS_SUBPROTOCOL})"
)


@contextlib.contextmanager
def ws_open(server: EndpointOrUrl) -> Iterator[ClientConnection]:
    """`ws_connect` for a check that needs the handshake accepted: a refusal fails it."""
    try:
        connection = ws_connect(server)
    except InvalidStatus as refused:
        fail(
            sent=HANDSHAKE_SENT,
            expected="101 Switching Protocols",
            came=f"status {refused.response.status_code}, the handshake refused",
        )
    except InvalidHandshake as broken:  # no HTTP response the client library could read
        fail(
            sent=HANDSHAKE_SENT,
            expected="101 Switching Protocols",
            came=f"{type(broken).__name__}: {broken}",
        )
    with connection:
        yield connection


def check_websocket_handshake(server: EndpointOrUrl) -> str:
    """The contract's handshake is accepted with its subprotocol; messages and a ping pass."""
    with ws_open(server) as ws:
        expect(
            ws.subprotocol == contract.WS_SUBPROTOCOL,
            sent=f"a /ws handshake offering the subprotocol {contract.WS_SUBPROTOCOL}",
            expected=f"101 selecting {contract.WS_SUBPROTOCOL}",
            came=f"101 selecting {ws.subprotocol!r}",
        )
        for i in range(5):
            ws.send(json.dumps({"a": "b", "i": i}))
        ws.ping().wait(5)
    return f"101, subprotocol {contract.WS_SUBPROTOCOL}, messages accepted"


def check_websocket_long_message(server: EndpointOrUrl) -> str:
    """A message just under the limit is accepted and the connection stays open."""
    payload = json.dumps({"testKeyValue": "v" * (contract.WS_MAX_MESSAGE_BYTES - 100)})
    with ws_open(server) as ws:
        ws.send(payload)
        ws.ping().wait(5)
        ws.send('{"still": "open"}')
        ws.ping().wait(5)
    return f"a {len(payload)}-byte message accepted"


def refused_with(server: EndpointOrUrl, **options: Any) -> int | None:
    """The status a handshake with `options` is refused with (None: it was accepted)."""
    try:
        with ws_connect(server, **options):
            return None
    except InvalidStatus as refused:
        return refused.response.status_code


def check_websocket_origin(server: EndpointOrUrl) -> str:
    """A handshake from another Origin, or with none, is refused; still serving."""
    for origin in ("elsewhere", None):
        status = refused_with(server, origin=origin)
        expect(
            status == contract.WS_BAD_ORIGIN_STATUS,
            sent=f"a /ws handshake with {f'Origin: {origin}' if origin else 'no Origin'}",
            expected=f"{contract.WS_BAD_ORIGIN_STATUS}, the handshake refused",
            came="101, the handshake accepted" if status is None else f"status {status}",
        )
    expect_still_serving(server, "a refused handshake")
    return f"Origin 'elsewhere' and no Origin refused with {contract.WS_BAD_ORIGIN_STATUS}"


def check_websocket_subprotocol(server: EndpointOrUrl) -> str:
    """A handshake offering no subprotocol is refused."""
    status = refused_with(server, subprotocols=())
    expect(
        status == contract.WS_NO_SUBPROTOCOL_STATUS,
        sent="a /ws handshake offering no subprotocol",
        expected=f"{contract.WS_NO_SUBPROTOCOL_STATUS}, the handshake refused",
        came="101, the handshake accepted" if status is None else f"status {status}",
    )
    return f"no subprotocol refused with {status}"


def _close_code_after(server: EndpointOrUrl, payload: str | bytes) -> int | None:
    with ws_open(server) as ws:
        try:
            ws.send(payload)  # the server may close while a big message is still going out
            for _ in range(10):
                ws.recv(timeout=5)
        except ConnectionClosed:
            return ws.close_code  # 1006 when no close frame came
        except TimeoutError:
            return None
    return None


def _bad_messages_close_with(server: EndpointOrUrl, code: int, *payloads: str | bytes) -> str:
    for payload in payloads:
        closed = _close_code_after(server, payload)
        kind = "binary" if isinstance(payload, bytes) else "text"
        expect(
            closed == code,
            sent=f"a {kind} message {excerpt(payload, 20)}",
            expected=f"a close with code {code}",
            came=_close_text(closed),
        )
    expect_still_serving(server, f"a {code} close")
    return f"closed with {code}"


def _close_text(code: int | None) -> str:
    if code is None:
        return "no close within 5 s"
    if code == 1006:  # the client library's word for a connection lost without a close
        return "a dropped connection, no close frame (1006)"
    return f"a close with code {code}"


def check_websocket_binary(server: EndpointOrUrl) -> str:
    """A binary message closes with 1003."""
    return _bad_messages_close_with(server, contract.WS_CLOSE_UNSUPPORTED_DATA, b"\x00\x01bin")


def check_websocket_invalid_json(server: EndpointOrUrl) -> str:
    """Invalid JSON, and JSON that is not an object, close with 1007."""
    code = contract.WS_CLOSE_INVALID_PAYLOAD
    return "invalid JSON and a non-object " + _bad_messages_close_with(
        server, code, "not json", "[1, 2]"
    )


def check_websocket_too_big(server: EndpointOrUrl) -> str:
    """A message over the limit closes with 1009."""
    payload = '{"a": "' + "x" * contract.WS_MAX_MESSAGE_BYTES + '"}'
    return "a message over 1 MiB " + _bad_messages_close_with(
        server, contract.WS_CLOSE_TOO_BIG, payload
    )


# -- raw WebSocket frames (RFC 6455 §5.2): what no well-behaved client library sends --------
_WS_KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def ws_frame(
    opcode: int,
    payload: bytes = b"",
    *,
    fin: bool = True,
    mask: bool = True,
    declared_length: int | None = None,
    rsv: int = 0,
    mask_key: bytes | None = None,
    length_bytes: int | None = None,
) -> bytes:
    """One frame as a client sends it: masked unless `mask=False`; `declared_length` puts
    another length than the payload's in the header (a 2 GiB frame, sent as a header).

    For the fuzz suite: `rsv` sets the three RSV bits (0-7, no extension allows them),
    `mask_key` is the 4-byte key (a random one by default), and `length_bytes` (2 or 8)
    writes the length in that extended form even when a shorter one would do."""
    length = len(payload) if declared_length is None else declared_length
    head = bytes([(0x80 if fin else 0) | (rsv << 4) | opcode])
    mask_bit = 0x80 if mask else 0
    if length_bytes is None:
        length_bytes = 0 if length < 126 else 2 if length < 1 << 16 else 8
    if length_bytes == 0:
        head += bytes([mask_bit | length])
    elif length_bytes == 2:
        head += bytes([mask_bit | 126]) + length.to_bytes(2)
    else:
        head += bytes([mask_bit | 127]) + length.to_bytes(8)
    if not mask:
        return head + payload
    key = os.urandom(4) if mask_key is None else mask_key
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def raw_ws_connect(port: int, timeout_s: float = 5.0, host: str = "127.0.0.1") -> socket.socket:
    """A raw socket to `/ws` past a valid handshake (the contract's Origin and protocol)."""
    sock = socket.create_connection((host, port), timeout=timeout_s)
    return raw_ws_handshake(sock, host, port)


def raw_ws_handshake(sock: socket.socket, host: str, port: int) -> socket.socket:
    """`sock` past a valid `/ws` handshake (the contract's Origin and protocol)."""
    sock.sendall(
        (
            f"GET {contract.ROUTE_WEBSOCKET} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {_WS_KEY}\r\nSec-WebSocket-Version: 13\r\n"
            f"Origin: {contract.WS_ORIGIN}\r\nSec-WebSocket-Protocol: {contract.WS_SUBPROTOCOL}\r\n"
            "\r\n"
        ).encode()
    )
    sent = HANDSHAKE_SENT
    reply = b""
    while b"\r\n\r\n" not in reply:
        chunk = sock.recv(4096)
        expect(
            bool(chunk),
            sent=sent,
            expected="a 101 response",
            came=f"a close during the handshake, after {excerpt(reply)}",
        )
        reply += chunk
    head, _, rest = reply.partition(b"\r\n\r\n")
    expect(
        reply.startswith(b"HTTP/1.1 101"),
        sent=sent,
        expected="a 101 response",
        came=excerpt(head),
    )
    expect(  # the server sends nothing before the client does
        not rest,
        sent=sent,
        expected="a 101 response, then nothing until the client sends",
        came=f"a 101, then {excerpt(rest)}",
    )
    return sock


def raw_ws_close_code(sock: socket.socket, timeout_s: float = 5.0) -> int | None:
    """Read frames until the server's close frame: its code (None when the server dropped
    the connection without one, or sent none within `timeout_s`)."""
    return raw_ws_close(sock, timeout_s)[0]


def raw_ws_close(sock: socket.socket, timeout_s: float = 5.0) -> tuple[int | None, str]:
    """Read frames until the server's close frame: its code (None: no code came) and how
    the connection ended, in words (`a close frame with code 1002`)."""
    sock.settimeout(timeout_s)
    buffer = b""
    try:
        while True:
            while len(buffer) >= 2:
                length = buffer[1] & 0x7F
                start = 2 + (2 if length == 126 else 8 if length == 127 else 0)
                if length >= 126:
                    if len(buffer) < start:
                        break
                    length = int.from_bytes(buffer[2:start])
                if len(buffer) < start + length:
                    break
                opcode, payload = buffer[0] & 0x0F, buffer[start : start + length]
                buffer = buffer[start + length :]
                if opcode == 0x8:
                    if len(payload) < 2:
                        return None, "a close frame without a code"
                    code = int.from_bytes(payload[:2])
                    return code, f"a close frame with code {code}"
            chunk = sock.recv(65536)
            if not chunk:
                return None, "the connection closed without a close frame"
            buffer += chunk
    except TimeoutError:
        return None, f"no close frame within {timeout_s:g} s"
    except ConnectionResetError:
        return None, "a reset, without a close frame"


# RFC 6455 rules beyond the contract's codes, sent as raw frames (servers/core/websocket.py):
# each by the `deviations` key that declares a server bending it, and what it earns as the
# server's close code. A server that closes otherwise (or not at all) deviates: a
# robustness rule bent, not a wrong answer (harness.verify.severity).
RAW_FRAME_CASES: dict[str, tuple[bytes, int]] = {
    "ws-unmasked-frame": (
        ws_frame(0x1, b'{"a": 1}', mask=False),
        contract.WS_CLOSE_PROTOCOL_ERROR,
    ),
    "ws-invalid-utf8": (ws_frame(0x1, b'{"a": "\xff\xfe"}'), contract.WS_CLOSE_INVALID_PAYLOAD),
    "ws-close-code-999": (ws_frame(0x8, (999).to_bytes(2)), contract.WS_CLOSE_PROTOCOL_ERROR),
    "ws-2-gib-header": (
        ws_frame(0x1, b"", declared_length=2**31),
        contract.WS_CLOSE_TOO_BIG,
    ),
    # found by the fuzz suite (tests/e2e/test_fuzz.py): tornado dropped a reserved opcode
    # and a bad close reason without a close frame, twisted a one-byte close and a bad
    # reason, aiohttp echoed 1006 with 1000, and the Python servers stored NaN
    "ws-reserved-opcode": (ws_frame(0x3, b"x"), contract.WS_CLOSE_PROTOCOL_ERROR),
    "ws-close-code-1006": (ws_frame(0x8, (1006).to_bytes(2)), contract.WS_CLOSE_PROTOCOL_ERROR),
    "ws-one-byte-close": (ws_frame(0x8, b"\x03"), contract.WS_CLOSE_PROTOCOL_ERROR),
    "ws-close-reason-not-utf8": (
        ws_frame(0x8, (1000).to_bytes(2) + b"\xff"),
        contract.WS_CLOSE_INVALID_PAYLOAD,
    ),
    "ws-nan": (ws_frame(0x1, b'{"a": NaN}'), contract.WS_CLOSE_INVALID_PAYLOAD),
}
# Each raw frame in words, for a finding's "sent".
RAW_FRAME_SENT: dict[str, str] = {
    "ws-unmasked-frame": "a text frame without a mask",
    "ws-invalid-utf8": "a text frame that is not UTF-8",
    "ws-close-code-999": "a close frame with code 999",
    "ws-2-gib-header": "a text frame header declaring 2 GiB",
    "ws-reserved-opcode": "a frame of reserved opcode 0x3",
    "ws-close-code-1006": "a close frame with code 1006 (a code no endpoint may send)",
    "ws-one-byte-close": "a close frame with a one-byte payload",
    "ws-close-reason-not-utf8": "a close frame (1000) whose reason is not UTF-8",
    "ws-nan": 'a text message {"a": NaN} (NaN is not JSON)',
}
RAW_FRAME_WAIT_S = 3.0


def check_websocket_raw_frames(server: EndpointOrUrl, framework: str = "") -> str | Outcome:
    """Raw frames no client library sends: each closes with RFC 6455's code, at once. A
    server that closes otherwise deviates (harness.verify.severity), declared when
    `framework`'s `deviations` name the frame's key; one declared but answered now fails
    the check. The server must still serve after them all."""
    endpoint = endpoint_of(server)
    deviations = []
    for key, (frame, code) in RAW_FRAME_CASES.items():
        with raw_ws_handshake(open_connection(endpoint), endpoint.host, endpoint.port) as sock:
            sock.sendall(frame)
            closed, came = raw_ws_close(sock, timeout_s=RAW_FRAME_WAIT_S)
        deviations.append(
            judge_rule(
                "ws-raw-frames",
                key,
                closed == code,
                sent=f"{RAW_FRAME_SENT[key]}, after a valid /ws handshake",
                expected=f"a close frame with code {code} within {RAW_FRAME_WAIT_S:g} s "
                "(RFC 6455 §7.1.7)",
                came=came,
                framework=framework,
            )
        )
    expect_still_serving(server, "the raw WebSocket frames")
    closed_with = [f"{key} {code}" for key, (_, code) in RAW_FRAME_CASES.items()]
    held = [said for said, deviation in zip(closed_with, deviations, strict=True) if not deviation]
    return with_deviations(f"closed with their codes: {', '.join(held) or 'none'}", deviations)


WEBSOCKET_CHECKS: dict[str, CheckFunction] = {
    "ws-handshake": check_websocket_handshake,
    "ws-long-message": check_websocket_long_message,
    "ws-origin": check_websocket_origin,
    "ws-subprotocol": check_websocket_subprotocol,
    "ws-1003": check_websocket_binary,
    "ws-1007": check_websocket_invalid_json,
    "ws-1009": check_websocket_too_big,
    "ws-raw-frames": check_websocket_raw_frames,
}
# Every WebSocket check needs /ws; none runs over HTTP/2 (RFC 8441 is not in the contract).
WEBSOCKET_CHECK_ROUTES = dict.fromkeys(WEBSOCKET_CHECKS, contract.ROUTE_WEBSOCKET)
WEBSOCKET_NOT_OVER_H2 = dict.fromkeys(
    WEBSOCKET_CHECKS, "WebSocket over HTTP/2 (RFC 8441) is not in the contract"
)
