"""The HTTP/2 checks of the h2 and h2c cases, spoken with the h2 library over a socket:
SETTINGS exchanged and ours honoured, many concurrent streams on one connection, a reset
stream that leaves the connection serving, and malformed frames answered with GOAWAY
while the server keeps serving new connections."""

from __future__ import annotations

from h2.errors import ErrorCodes
from h2.settings import SettingCodes

from harness.verify.endpoint import CheckFunction, EndpointOrUrl, endpoint_of
from harness.verify.failure import excerpt, expect, expect_status
from harness.verify.h2wire import (
    FRAME_DATA,
    FRAME_PING,
    FRAME_PUSH_PROMISE,
    FRAME_SETTINGS,
    FRAME_WINDOW_UPDATE,
    PREFACE,
    H2Session,
    RawFrame,
    h2_frame,
    open_h2_socket,
    read_raw_frames,
)
from harness.verify.severity import Outcome, judge_rule, with_deviations
from harness.verify.wire import expect_still_serving
from servers import contract

# Our SETTINGS: no server push, and a stream window smaller than the contract's body, so
# honouring it shows (RFC 9113 §6.9.2: the server may send this much, then waits).
OUR_WINDOW_BYTES = 8
OUR_SETTINGS = {SettingCodes.ENABLE_PUSH: 0, SettingCodes.INITIAL_WINDOW_SIZE: OUR_WINDOW_BYTES}
# How long the check waits for DATA past our window before calling the window honoured.
WINDOW_QUIET_S = 0.5
CONCURRENT_STREAMS = 50  # GET / at once on one connection
CONCURRENT_WAIT_S = 10.0
OVERSIZED_FRAME = "h2-oversized-frame"
# Frames that are a connection error (RFC 9113 §5.4.1), each sent on a new connection
# after a valid preface: each earns a GOAWAY. The names are what a Framework's
# `deviations` names, as for the malformed HTTP/1.1 requests.
MALFORMED_FRAMES: dict[str, bytes] = {
    "h2-data-on-stream-0": h2_frame(FRAME_DATA, b"hello", stream_id=0),  # §6.1
    "h2-ping-7-bytes": h2_frame(FRAME_PING, b"\x00" * 7),  # §6.7: FRAME_SIZE_ERROR
    "h2-settings-5-bytes": h2_frame(FRAME_SETTINGS, b"\x00" * 5),  # §6.5: FRAME_SIZE_ERROR
    "h2-window-update-0": h2_frame(FRAME_WINDOW_UPDATE, bytes(4)),  # §6.9: PROTOCOL_ERROR
    "h2-push-promise-from-client": h2_frame(FRAME_PUSH_PROMISE, bytes(4), stream_id=1),  # §8.4
    # a frame one byte past the server's SETTINGS_MAX_FRAME_SIZE (§4.2): written once the
    # server's SETTINGS are read (`oversized_frame`)
    OVERSIZED_FRAME: b"",
}
# Each malformed frame in words, for a finding's "sent".
MALFORMED_FRAME_SENT: dict[str, str] = {
    "h2-data-on-stream-0": "a DATA frame on stream 0",
    "h2-ping-7-bytes": "a PING frame of 7 bytes",
    "h2-settings-5-bytes": "a SETTINGS frame of 5 bytes",
    "h2-window-update-0": "a WINDOW_UPDATE of 0 on the connection",
    "h2-push-promise-from-client": "a PUSH_PROMISE from the client",
    OVERSIZED_FRAME: "a DATA frame one byte past the server's SETTINGS_MAX_FRAME_SIZE",
}
SETTINGS_MAX_FRAME_SIZE = 0x5
DEFAULT_MAX_FRAME_BYTES = 2**14
LARGEST_FRAME_BYTES = 2**24 - 1  # a frame's length field holds no more
GOAWAY_WAIT_S = 3.0


def error_name(code: int) -> str:
    """An HTTP/2 error code by its RFC 9113 name (the number when it has none)."""
    try:
        return ErrorCodes(code).name
    except ValueError:
        return str(code)


def _expect_contract_body(session: H2Session, stream_id: int, what: str) -> None:
    response = session.response(stream_id)
    sent = f"{response.request} on stream {stream_id} ({what})"
    reset = f", reset {error_name(response.reset_code)}" if response.reset_code is not None else ""
    expect_status(response.status, sent=sent, came_more=reset)
    expect(
        response.body == contract.TEXT_BODY,
        sent=sent,
        expected=f"the body {contract.TEXT_BODY!r}",
        came=f"the body {excerpt(response.body)}",
    )


def check_h2_settings(server: EndpointOrUrl) -> str:
    """The server's SETTINGS come first; ours are ACKed and honoured: no push, and a
    response held to our 8-byte stream window until we open it."""
    with H2Session(server, settings=OUR_SETTINGS, acknowledge_data=False) as session:
        session.start()
        session.wait(lambda: session.settings_acknowledged)
        ours = "our SETTINGS (ENABLE_PUSH 0, INITIAL_WINDOW_SIZE 8)"
        expect(
            session.settings_acknowledged,
            sent=ours,
            expected="a SETTINGS ACK",
            came=f"none: {session.why()}",
        )
        remote = session.conn.remote_settings
        theirs = (
            f"max_concurrent_streams {remote.max_concurrent_streams}, "
            f"initial_window_size {remote.initial_window_size}, "
            f"max_frame_size {remote.max_frame_size}"
        )
        stream_id = session.request("GET", contract.ROUTE_TEXT)
        response = session.responses[stream_id]
        session.wait(lambda: response.done, WINDOW_QUIET_S)
        sent = f"GET / after {ours}"
        expected = f"at most {OUR_WINDOW_BYTES} bytes of the body until our WINDOW_UPDATE"
        expect(
            session.protocol_error is None,
            sent=sent,
            expected=expected,
            came=f"frames the h2 library refused: {session.why()}",
        )
        held = len(response.body)
        expect(
            held <= OUR_WINDOW_BYTES and not response.done,
            sent=sent,
            expected=expected,
            came=f"{held} bytes" + (", the stream ended" if response.done else ""),
        )
        session.conn.increment_flow_control_window(2**16, stream_id)
        session.send_pending()
        _expect_contract_body(session, stream_id, "after our WINDOW_UPDATE")
        expect(
            session.pushed == 0,
            sent=sent,
            expected="no server push (ENABLE_PUSH 0)",
            came=f"{session.pushed} pushes",
        )
    return (
        f"server SETTINGS ({theirs}); ours ACKed; {held} bytes within our "
        f"{OUR_WINDOW_BYTES}-byte window until WINDOW_UPDATE, then the whole body"
    )


def check_h2_concurrent_streams(server: EndpointOrUrl) -> str:
    """CONCURRENT_STREAMS GET / at once on one connection: all 200 with the contract's body."""
    with H2Session(server) as session:
        session.start()
        limit = session.conn.remote_settings.max_concurrent_streams
        expect(
            limit >= CONCURRENT_STREAMS,
            sent="the HTTP/2 preface and our SETTINGS",
            expected=f"SETTINGS_MAX_CONCURRENT_STREAMS of at least {CONCURRENT_STREAMS} "
            "(RFC 9113 recommends at least 100)",
            came=f"SETTINGS_MAX_CONCURRENT_STREAMS {limit}",
        )
        stream_ids = [
            session.request("GET", contract.ROUTE_TEXT) for _ in range(CONCURRENT_STREAMS)
        ]
        session.wait(lambda: all(session.responses[s].done for s in stream_ids), CONCURRENT_WAIT_S)
        for stream_id in stream_ids:
            _expect_contract_body(session, stream_id, f"stream {stream_id}")
    return f"{CONCURRENT_STREAMS} concurrent GET / on one connection, all 200 (limit {limit})"


def check_h2_reset_stream(server: EndpointOrUrl) -> str:
    """A stream reset by the client (a POST whose body never came, a GET just sent) leaves
    the connection up: the next stream is answered."""
    with H2Session(server) as session:
        session.start()
        posted = session.request("POST", contract.ROUTE_LOG, end_stream=False)
        session.conn.reset_stream(posted, ErrorCodes.CANCEL)
        got = session.request("GET", contract.ROUTE_TEXT)
        session.conn.reset_stream(got, ErrorCodes.CANCEL)
        session.send_pending()
        after = session.request("GET", contract.ROUTE_TEXT)
        _expect_contract_body(session, after, "the stream after two resets")
        expect(
            session.terminated is None,
            sent="two streams reset with RST_STREAM (CANCEL), then GET /",
            expected="the connection kept up: no GOAWAY",
            came=session.why(),
        )
    return "two streams reset (CANCEL); the next answered 200 on the same connection"


def server_max_frame_bytes(frames: list[RawFrame]) -> int:
    """SETTINGS_MAX_FRAME_SIZE in the server's first SETTINGS (the default when unset)."""
    for frame in frames:
        if frame.frame_type == FRAME_SETTINGS and not frame.flags & 0x1:
            for at in range(0, len(frame.payload) - 5, 6):
                if int.from_bytes(frame.payload[at : at + 2]) == SETTINGS_MAX_FRAME_SIZE:
                    return int.from_bytes(frame.payload[at + 2 : at + 6])
    return DEFAULT_MAX_FRAME_BYTES


def oversized_frame(max_frame_bytes: int) -> bytes | None:
    """A whole DATA frame one byte longer than the server allows (None: it allows the
    largest a frame can be, so no frame is too long for it). Whole, since a server may
    read a frame to its end before judging its length (the h2 library does)."""
    if max_frame_bytes >= LARGEST_FRAME_BYTES:
        return None
    return h2_frame(FRAME_DATA, bytes(max_frame_bytes + 1), stream_id=1)


def _has_settings(frames: list[RawFrame]) -> bool:
    return any(f.frame_type == FRAME_SETTINGS and not f.flags & 0x1 for f in frames)


def _has_goaway(frames: list[RawFrame]) -> bool:
    return any(f.goaway_error is not None for f in frames)


def check_h2_malformed_frames(server: EndpointOrUrl, framework: str = "") -> str | Outcome:
    """Each malformed frame after a valid preface and the server's SETTINGS: GOAWAY with an
    error code, and the server still serves a new connection. A frame answered otherwise
    is a deviation (harness.verify.severity), declared when `framework`'s `deviations` name
    it (the frame's name); one declared but answered now fails the check."""
    endpoint = endpoint_of(server)
    answered, deviations, skipped = [], [], []
    for name, frame in MALFORMED_FRAMES.items():
        sent = f"{MALFORMED_FRAME_SENT[name]}, after the preface and the server's SETTINGS"
        with open_h2_socket(endpoint) as sock:
            sock.sendall(PREFACE + h2_frame(FRAME_SETTINGS))
            first, closed, rest = read_raw_frames(sock, _has_settings, GOAWAY_WAIT_S)
            expect(
                _has_settings(first),
                sent="the HTTP/2 preface and our SETTINGS",
                expected="the server's SETTINGS first (RFC 9113 §3.4)",
                came=f"no SETTINGS from the server ({_frames_text(first, rest)})",
            )
            if name == OVERSIZED_FRAME:
                limit = server_max_frame_bytes(first)
                frame = oversized_frame(limit) or b""
                if not frame:
                    skipped.append(f"{name} (its SETTINGS_MAX_FRAME_SIZE is {limit})")
                    continue
            sock.sendall(frame)
            frames, closed, _ = read_raw_frames(sock, _has_goaway, GOAWAY_WAIT_S)
        codes = [f.goaway_error for f in first + frames if f.goaway_error is not None]
        how = "closed" if closed else f"left open {GOAWAY_WAIT_S:g} s"
        came = f"GOAWAY {error_name(codes[0])}" if codes else f"no GOAWAY, the connection {how}"
        deviation = judge_rule(
            "h2-malformed-frames",
            name,
            bool(codes) and codes[0] != ErrorCodes.NO_ERROR,
            sent=sent,
            expected="a GOAWAY with an error code (RFC 9113 §5.4.1)",
            came=came,
            framework=framework,
        )
        if deviation is None:
            answered.append(f"{name} {error_name(codes[0])}")
        deviations.append(deviation)
        expect_still_serving(endpoint, MALFORMED_FRAME_SENT[name])
    detail = (
        "GOAWAY for "
        + (", ".join(answered) or "none")
        + "; still serving"
        + "".join(f"; no frame too long for it: {s}" for s in skipped)
    )
    return with_deviations(detail, deviations)


def _frames_text(frames: list[RawFrame], rest: bytes) -> str:
    """What came instead of the server's SETTINGS, in words."""
    if frames:
        return f"{len(frames)} frames, of types {', '.join(str(f.frame_type) for f in frames)}"
    return f"it sent {excerpt(rest)}" if rest else "nothing"


H2_CHECKS: dict[str, CheckFunction] = {
    "h2-settings": check_h2_settings,
    "h2-concurrent-streams": check_h2_concurrent_streams,
    "h2-reset-stream": check_h2_reset_stream,
    "h2-malformed-frames": check_h2_malformed_frames,
}
