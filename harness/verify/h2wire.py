"""HTTP/2 spoken over a socket with the h2 library (RFC 9113): a session with requests on
its streams, and frames written raw, which no client library sends.

The socket comes from the one connection factory (`open_connection`): TLS offering ALPN
`h2` for the h2 protocol, cleartext with prior knowledge (the preface at once) for h2c.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    Event,
    PushedStreamReceived,
    RemoteSettingsChanged,
    ResponseReceived,
    SettingsAcknowledged,
    StreamEnded,
    StreamReset,
)
from h2.exceptions import H2Error

from harness.verify.endpoint import EndpointOrUrl, endpoint_of, open_connection
from harness.verify.failure import excerpt, expect, fail

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# Frame types (RFC 9113 §6) the checks write or look for.
FRAME_DATA = 0x0
FRAME_HEADERS = 0x1
FRAME_PRIORITY = 0x2
FRAME_RST_STREAM = 0x3
FRAME_SETTINGS = 0x4
FRAME_PUSH_PROMISE = 0x5
FRAME_PING = 0x6
FRAME_GOAWAY = 0x7
FRAME_WINDOW_UPDATE = 0x8
FRAME_CONTINUATION = 0x9
FRAME_HEADER_BYTES = 9
H2_READ_BYTES = 65536


def h2_frame(
    frame_type: int,
    payload: bytes = b"",
    *,
    flags: int = 0,
    stream_id: int = 0,
    declared_length: int | None = None,
) -> bytes:
    """One frame as written on the wire; `declared_length` puts another length in its
    header than the payload's (a frame longer than the peer allows, sent as a header)."""
    length = len(payload) if declared_length is None else declared_length
    return (
        length.to_bytes(3)
        + bytes([frame_type, flags])
        + (stream_id & 0x7FFFFFFF).to_bytes(4)
        + payload
    )


@dataclass(frozen=True)
class RawFrame:
    """A frame as read off the wire."""

    frame_type: int
    flags: int
    stream_id: int
    payload: bytes

    @property
    def goaway_error(self) -> int | None:
        """A GOAWAY's error code (None: not a GOAWAY, or too short to hold one)."""
        if self.frame_type != FRAME_GOAWAY or len(self.payload) < 8:
            return None
        return int.from_bytes(self.payload[4:8])


def parse_frames(data: bytes) -> tuple[list[RawFrame], bytes]:
    """The whole frames at the start of `data`, and the bytes after them."""
    frames = []
    while len(data) >= FRAME_HEADER_BYTES:
        length = int.from_bytes(data[:3])
        if len(data) < FRAME_HEADER_BYTES + length:
            break
        stream_id = int.from_bytes(data[5:9]) & 0x7FFFFFFF
        frames.append(RawFrame(data[3], data[4], stream_id, data[9 : 9 + length]))
        data = data[FRAME_HEADER_BYTES + length :]
    return frames, data


def open_h2_socket(target: EndpointOrUrl, timeout_s: float = 5.0) -> socket.socket:
    """A connection ready for the preface: TLS with ALPN `h2` selected (h2), or TCP (h2c)."""
    endpoint = endpoint_of(target)
    sock = open_connection(endpoint, timeout_s, alpn=("h2",) if endpoint.tls else None)
    if endpoint.tls:
        selected = sock.selected_alpn_protocol()  # type: ignore[attr-defined]
        if selected != "h2":
            sock.close()
            fail(
                sent="a TLS handshake offering ALPN h2",
                expected="ALPN h2 selected",
                came=f"ALPN selected {selected!r}, not h2: the server does not speak h2",
            )
    return sock


def read_raw_frames(
    sock: socket.socket, until: Callable[[list[RawFrame]], bool], wait_s: float
) -> tuple[list[RawFrame], bool, bytes]:
    """Frames the server sends until `until(frames)` holds, it closes, or `wait_s` passes:
    (the frames, whether it closed, the bytes that were not a whole frame)."""
    deadline = time.monotonic() + wait_s
    buffer = b""
    frames: list[RawFrame] = []
    closed = False
    while not until(frames) and (remaining := deadline - time.monotonic()) > 0:
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(H2_READ_BYTES)
        except TimeoutError:
            break
        except (ConnectionResetError, BrokenPipeError):
            closed = True
            break
        if not chunk:
            closed = True
            break
        more, buffer = parse_frames(buffer + chunk)
        frames += more
    return frames, closed, buffer


@dataclass
class H2Response:
    """What came back on one stream."""

    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    ended: bool = False
    reset_code: int | None = None  # the server reset the stream with this error code
    request: str = ""  # what was sent on the stream (`GET /`), for a failure's line

    @property
    def done(self) -> bool:
        return self.ended or self.reset_code is not None


class H2Session:
    """One HTTP/2 connection, client side: the preface and our SETTINGS sent at once,
    the server's frames read through the h2 library, our flow-control window reopened as
    data arrives unless `acknowledge_data` is False (a check of the server's honouring)."""

    def __init__(
        self,
        target: EndpointOrUrl,
        timeout_s: float = 5.0,
        settings: dict[int, int] | None = None,
        acknowledge_data: bool = True,
    ) -> None:
        self.endpoint = endpoint_of(target)
        self.timeout_s = timeout_s
        self.acknowledge_data = acknowledge_data
        self.sock = open_h2_socket(self.endpoint, timeout_s)
        self.conn = H2Connection(H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.responses: dict[int, H2Response] = {}
        self.server_settings_received = False
        self.settings_acknowledged = False
        self.pushed = 0
        self.terminated: ConnectionTerminated | None = None
        self.closed = False  # the server closed the connection
        self.protocol_error: str | None = None  # what the h2 library refused in its frames
        self.first_bytes = b""  # the server's first bytes, to say what a non-h2 server sent
        self.received_bytes = 0
        self.send_pending()

    def __enter__(self) -> H2Session:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """GOAWAY (when the connection is still up) and close the socket."""
        try:
            if not self.closed and self.protocol_error is None:
                self.conn.close_connection()
                self.send_pending()
        except (OSError, H2Error):
            pass
        finally:
            self.sock.close()

    def send_pending(self) -> None:
        """Write what the h2 library has queued (frames, ACKs, window updates)."""
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(self, method: str, path: str, body: bytes = b"", end_stream: bool = True) -> int:
        """Open a stream with a request (`end_stream` False: the body never finishes)."""
        stream_id = self.conn.get_next_available_stream_id()
        headers = [
            (":method", method),
            (":scheme", "https" if self.endpoint.tls else "http"),
            (":authority", f"{self.endpoint.host}:{self.endpoint.port}"),
            (":path", path),
        ]
        if body:
            headers.append(("content-length", str(len(body))))
        self.conn.send_headers(stream_id, headers, end_stream=end_stream and not body)
        if body:
            self.conn.send_data(stream_id, body, end_stream=end_stream)
        self.responses[stream_id] = H2Response(request=f"{method} {path}")
        self.send_pending()
        return stream_id

    def receive_once(self, timeout_s: float) -> bool:
        """Read once (at most `timeout_s`) and handle the events; False when nothing more
        will come (closed, timed out, or a frame the h2 library refused)."""
        if self.closed or self.protocol_error is not None:
            return False
        self.sock.settimeout(max(timeout_s, 0.001))
        try:
            data = self.sock.recv(H2_READ_BYTES)
        except TimeoutError:
            return False
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        if not data:
            self.closed = True
            return False
        self.received_bytes += len(data)
        if len(self.first_bytes) < 64:
            self.first_bytes += data[: 64 - len(self.first_bytes)]
        try:
            events = self.conn.receive_data(data)
        except H2Error as error:
            self.protocol_error = f"{type(error).__name__}: {error}"
            return False
        for event in events:
            self._handle(event)
        try:
            self.send_pending()
        except OSError:
            self.closed = True
        return True

    def wait(self, until: Callable[[], bool], timeout_s: float | None = None) -> bool:
        """Read and handle frames until `until()` holds, nothing more can come, or
        `timeout_s` (the session's timeout by default) passes; whether it holds."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while not until() and (remaining := deadline - time.monotonic()) > 0:
            if not self.receive_once(remaining) and (self.closed or self.protocol_error):
                break
        return until()

    def start(self) -> None:
        """Wait for the server's SETTINGS (the first frame it must send, RFC 9113 §3.4)."""
        self.wait(lambda: self.server_settings_received)
        expect(
            self.server_settings_received,
            sent="the HTTP/2 preface and our SETTINGS",
            expected="the server's SETTINGS first (RFC 9113 §3.4)",
            came=f"no SETTINGS from the server: {self.why()}",
        )

    def response(self, stream_id: int, timeout_s: float | None = None) -> H2Response:
        """The response on `stream_id`, once ended or reset (else the check fails)."""
        response = self.responses[stream_id]
        self.wait(lambda: response.done, timeout_s)
        expect(
            response.done,
            sent=f"{response.request} on stream {stream_id}",
            expected="a whole response (or a reset) on the stream",
            came=f"the stream not answered: {self.why()}",
        )
        return response

    def why(self) -> str:
        """What the connection did instead (for a failed check's detail)."""
        if self.protocol_error is not None:
            return f"{self.protocol_error} (the server sent {self._first()})"
        if self.terminated is not None:
            return f"GOAWAY with error code {self.terminated.error_code}"
        if self.closed:
            return f"closed (after {self._first()})"
        return f"nothing within {self.timeout_s} s"

    def _first(self) -> str:
        return excerpt(self.first_bytes, total=self.received_bytes)

    def _handle(self, event: Event) -> None:
        if isinstance(event, RemoteSettingsChanged):
            self.server_settings_received = True
        elif isinstance(event, SettingsAcknowledged):
            self.settings_acknowledged = True
        elif isinstance(event, ConnectionTerminated):
            self.terminated = event
        elif isinstance(event, PushedStreamReceived):
            self.pushed += 1
        elif isinstance(event, ResponseReceived) and event.stream_id in self.responses:
            response = self.responses[event.stream_id]
            headers = {str(name): str(value) for name, value in event.headers or ()}
            response.headers = headers
            response.status = int(headers.get(":status", "0"))
        elif isinstance(event, DataReceived) and event.stream_id in self.responses:
            self.responses[event.stream_id].body += event.data or b""
            if self.acknowledge_data and event.flow_controlled_length:
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, StreamEnded) and event.stream_id in self.responses:
            self.responses[event.stream_id].ended = True
        elif isinstance(event, StreamReset) and event.stream_id in self.responses:
            self.responses[event.stream_id].reset_code = int(event.error_code or 0)


def h2_exchange(
    target: EndpointOrUrl, method: str, path: str, body: bytes = b"", timeout_s: float = 5.0
) -> H2Response:
    """One request, exactly as written (`path` not normalised), on a new connection."""
    with H2Session(target, timeout_s) as session:
        session.start()
        return session.response(session.request(method, path, body))
