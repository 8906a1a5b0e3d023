"""The `/ws` rules every server judges alike: which handshakes are refused, which messages close.

Beyond the contract's own codes, RFC 6455 rules every server applies (most through its
framework's parser; where a framework does not, its module enforces them with these):
a client's frames are masked and framed as §5.2-§5.5 says (else 1002), text is valid
UTF-8 (§8.1, else 1007),
a close frame's code is one a peer may send (§7.4, else 1002), and a frame whose declared
length takes its message over the limit is refused (1009) before its payload arrives.
"""

from __future__ import annotations

import json

from servers import contract

# A lingering close. A close that fails the connection (1009, 1002, 1007: the server's parser
# stops) may come while the client is still sending, an oversized message's payload above
# all. Closing a socket with unread bytes makes the kernel reset the connection, and the
# reset can cost the client the close frame: over TLS its send fails first and it records
# 1006 (verify's ws-1009, h1-tls, 30 checks each: gevent 5, tornado 3, aiohttp 2). So the
# server half-closes after its close frame where it can (the client reads it, then EOF)
# and reads and drops what still comes until the client closes (aiohttp's TLS transports
# cannot half-close: until the client's close frame has come, ClientFrameWatch), at most
# WS_LINGER_S and WS_LINGER_MAX_BYTES, and only then closes.
WS_LINGER_S = 2.0
WS_LINGER_MAX_BYTES = 16 * contract.WS_MAX_MESSAGE_BYTES


class LingerDrain:
    """One lingering close's bounds: it ends once WS_LINGER_MAX_BYTES were read and
    dropped (`drop` says so), or WS_LINGER_S after it began (`remaining_s`, for a runtime
    that waits on the socket itself; one with timers arms its own with WS_LINGER_S). The
    client's EOF ends it too, and, where the runtime walks the frames, its close frame.
    """

    __slots__ = ("_ends_at_s", "dropped_bytes")

    def __init__(self, started_s: float = 0.0) -> None:
        self.dropped_bytes = 0
        self._ends_at_s = started_s + WS_LINGER_S

    def drop(self, data_bytes: int) -> bool:
        """Count `data_bytes` more read and dropped; False once enough were: close now."""
        self.dropped_bytes += data_bytes
        return self.dropped_bytes < WS_LINGER_MAX_BYTES

    def remaining_s(self, now_s: float) -> float:
        """How long the linger may still wait, on the clock `started_s` was read from."""
        return self._ends_at_s - now_s


def websocket_close_code(message: str | bytes) -> int | None:
    """The close code a WebSocket message earns, or None when it is a valid JSON object.

    Size is checked by each framework's own frame limit; this only judges content.
    """
    if isinstance(message, bytes):
        return contract.WS_CLOSE_UNSUPPORTED_DATA
    try:
        # RFC 8259 JSON, read as the Node servers' JSON.parse reads it: NaN and Infinity
        # are not JSON, and a number is a double (5,000 digits are a number, not Python's
        # int-conversion limit). Nesting past Python's recursion limit (about 1,000 levels,
        # which JSON.parse takes) is refused here rather than raised out of the handler.
        value = json.loads(message, parse_constant=_not_json, parse_int=float)
    except (ValueError, RecursionError):
        return contract.WS_CLOSE_INVALID_PAYLOAD
    if not isinstance(value, dict):
        return contract.WS_CLOSE_INVALID_PAYLOAD
    return None


# RFC 6455 §5.2: opcodes 0x3-0x7 and 0xB-0xF are reserved for frames not defined yet
_RESERVED_OPCODES = frozenset({0x3, 0x4, 0x5, 0x6, 0x7, 0xB, 0xC, 0xD, 0xE, 0xF})


def frame_header_error(header: bytes, inside_message: bool) -> str | None:
    """Why a client frame whose first two bytes are `header` breaks RFC 6455's framing
    (§5.1-§5.5: the server closes with 1002), or None. `inside_message`: a fragmented
    message has begun and not ended. No extension is negotiated, so no RSV bit may be set.

    For a framework whose parser drops such a connection without a close frame (tornado).
    """
    first, second = header[0], header[1]
    opcode = first & 0x0F
    if not second & 0x80:
        return "an unmasked frame"
    if first & 0x70:
        return "RSV bits set without an extension"
    if opcode in _RESERVED_OPCODES:
        return f"reserved opcode {opcode:#x}"
    if opcode & 0x8:
        if not first & 0x80:
            return "a fragmented control frame"
        if second & 0x7F > 125:
            return "a control frame over 125 bytes"
    elif opcode == 0 and not inside_message:
        return "a continuation frame outside a fragmented message"
    elif opcode != 0 and inside_message:
        return "a new message inside a fragmented one"
    return None


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON (RFC 8259)")


def websocket_handshake_status(origin: str | None, offered_protocols: str | None) -> int | None:
    """The HTTP status refusing a `/ws` handshake, or None when it may proceed.

    `offered_protocols` is the raw Sec-WebSocket-Protocol header (comma separated).
    """
    if origin != contract.WS_ORIGIN:
        return contract.WS_BAD_ORIGIN_STATUS
    offered = [p.strip() for p in (offered_protocols or "").split(",")]
    if contract.WS_SUBPROTOCOL not in offered:
        return contract.WS_NO_SUBPROTOCOL_STATUS
    return None


def peer_close_code_valid(code: int) -> bool:
    """Whether a close frame from the peer may carry `code` (RFC 6455 §7.4.1/§7.4.2):
    the defined codes a peer may send (1000-1003, 1007-1014) and 3000-4999. 1004-1006
    and 1015 must never be sent; the rest of 0-2999 is unassigned (999, 2000 ...)."""
    return 1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999


class ClientFrameWatch:
    """Walks a client's byte stream frame by frame — headers read, payloads skipped — to
    find a frame without the mask bit (RFC 6455 §5.1: the server must close with 1002), and
    to tell when a close frame has come whole (`close_came`: the client has the server's
    close frame then, and a lingering close may end).

    For a framework whose own parser accepts unmasked client frames (aiohttp): it sees
    each chunk before the parser does, and goes on walking what a failed stream drains.
    Frames may split across chunks anywhere.
    """

    __slots__ = ("_head", "_in_close", "_skip", "close_came")

    def __init__(self) -> None:
        self._head = b""  # the start of a frame header split across chunks
        self._skip = 0  # payload bytes of the current frame still to come
        self._in_close = False  # the current frame is a close frame
        self.close_came = False  # a close frame has come whole

    def feed(self, data: bytes) -> bool:
        """False when a frame beginning in `data` is unmasked (the stream is then bad, and
        the walk stops there: its place in the stream is lost)."""
        pos, end = 0, len(data)
        while True:
            if self._skip:
                step = min(self._skip, end - pos)
                self._skip -= step
                pos += step
            if self._in_close and not self._skip:
                self._in_close, self.close_came = False, True
            if pos >= end:
                return True
            kept = len(self._head)
            head = self._head + data[pos : pos + 14 - kept]  # 14: the longest header
            if len(head) >= 2 and not head[1] & 0x80:
                return False
            if len(head) < 2:
                self._head = head
                return True
            short_length = head[1] & 0x7F
            extended = 2 if short_length == 126 else 8 if short_length == 127 else 0
            header_bytes = 2 + extended + 4  # + the masking key
            if len(head) < header_bytes:  # the rest of the header is in a later chunk
                self._head = head
                return True
            self._skip = int.from_bytes(head[2 : 2 + extended]) if extended else short_length
            self._in_close = head[0] & 0x0F == 0x8
            pos += header_bytes - kept
            self._head = b""
