"""The green servers' WebSocket session (gevent, eventlet), after the handshake
(servers.runtimes.green.upgrade): RFC 6455 framing through wsproto (sans-IO) over the green
socket, read until the close handshake ends. Each whole message is judged, counted and
stored through the sink without waiting (servers.core.ws_messages, every server's rule).

Import this only after the framework has monkey-patched the standard library: the
`threading.Lock` and `time.monotonic` used here are then the green ones.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Event, Ping, TextMessage
from wsproto.extensions import Extension
from wsproto.frame_protocol import CloseReason, Opcode, RsvBits

from servers import contract
from servers.core.shutdown import WS_SHUTDOWN_REASON
from servers.core.state import ServerState
from servers.core.websocket import LingerDrain
from servers.core.ws_messages import take_message
from servers.runtimes.green.interfaces import Sink

# How long a closing WebSocket waits for the client's close frame. Not a contract rule:
# each framework keeps its own (aiohttp 10 s, tornado 5 s, autobahn 1 s); green takes aiohttp's.
WS_CLOSE_TIMEOUT_S = 10.0
WS_READ_BYTES = 64 * 1024
# A WebSocket session busy on data already received gives the loop a turn this often.
_YIELD_EVERY_S = 0.005


class DeclaredSizeLimit(Extension):
    """A wsproto hook on every frame header: a frame whose declared length takes its message
    over contract.WS_MAX_MESSAGE_BYTES is refused with 1009 at once, before its payload
    arrives (a header declaring 2 GiB is not answered only once 1 MiB came in).

    Never negotiated (no Sec-WebSocket-Extensions): wsproto runs an extension's hooks when
    it is handed to the `Connection`, which is all this needs; it claims no RSV bit.
    """

    name = "declared-size-limit"

    def __init__(self) -> None:
        self._message_bytes = 0

    def enabled(self) -> bool:
        return True

    def offer(self) -> bool:
        return False

    def frame_inbound_header(
        self, proto: Any, opcode: Opcode, rsv: RsvBits, payload_length: int
    ) -> CloseReason | RsvBits:
        if not opcode.iscontrol():
            if opcode is not Opcode.CONTINUATION:
                self._message_bytes = 0
            self._message_bytes += payload_length
            if self._message_bytes > contract.WS_MAX_MESSAGE_BYTES:
                return CloseReason.MESSAGE_TOO_BIG
        return RsvBits(False, False, False)


def _yield_to_the_loop() -> float:
    """Let every other green thread, timer and socket have a turn; the next deadline.

    A sleep > 0 (green after monkey-patching) resumes after one turn of the event loop;
    gevent runs `sleep(0)` callbacks back to back, ~50 of them before it looks at timers.
    """
    time.sleep(1e-6)
    return time.monotonic() + _YIELD_EVERY_S


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


class WebSocketSession:
    """One server-side WebSocket after the handshake: read, judge, store, close.

    The session's own greenlet reads and answers; the only other sender is `go_away`,
    called from the shutdown greenlet, so sends are serialised by a (green) lock.
    """

    def __init__(
        self,
        sock: socket.socket,
        state: ServerState,
        sink: Sink,
        share_turn: Callable[[], None],
        received: bytes = b"",
    ) -> None:
        """`received`: bytes of the connection that came before the session (frames the
        WSGI server read past the upgrade request), handled before the socket is read."""
        self._sock = sock
        self._received = received
        self._share_turn = share_turn
        self._state = state
        self._sink = sink
        self._ws = Connection(ConnectionType.SERVER, extensions=[DeclaredSizeLimit()])
        self._send_lock = threading.Lock()
        self._going_away = False
        # The text message being received: its parts so far and their UTF-8 size.
        self._parts: list[str] = []
        self._message_bytes = 0

    def go_away(self) -> None:
        """Start the closing handshake with 1001 (server shutdown); safe from any greenlet."""
        self._going_away = True
        # If the session is sending right now, it sees the flag before its next read.
        if self._send_lock.acquire(blocking=False):
            try:
                self._close_locked(contract.WS_CLOSE_GOING_AWAY, WS_SHUTDOWN_REASON)
            except OSError:
                pass
            finally:
                self._send_lock.release()

    def run(self) -> None:
        """Serve until the closing handshake completes, the peer vanishes, or time runs out."""
        with contextlib.suppress(OSError):  # reset, broken pipe, close timeout: gone
            self._run()

    def _run(self) -> None:
        ws = self._ws
        closing_deadline: float | None = None
        yield_at = time.monotonic() + _YIELD_EVERY_S
        while ws.state is not ConnectionState.CLOSED:
            if self._going_away and ws.state is ConnectionState.OPEN:
                self._close(contract.WS_CLOSE_GOING_AWAY, WS_SHUTDOWN_REASON)
            if ws.state is ConnectionState.LOCAL_CLOSING:
                # Waiting for the client's close frame: bounded, whatever it still sends.
                if closing_deadline is None:
                    closing_deadline = time.monotonic() + WS_CLOSE_TIMEOUT_S
                remaining_s = closing_deadline - time.monotonic()
                if remaining_s <= 0:
                    return
                self._sock.settimeout(remaining_s)
            data = self._read()
            self._share_turn()
            # A read that finds data waiting does not switch to the hub: without these
            # yields one client sending without pause starves every other green thread
            # (ticks, telemetry, the sink's writer, shutdown: 4.5 s tick gaps measured).
            if time.monotonic() >= yield_at:
                yield_at = _yield_to_the_loop()
            ws.receive_data(data or None)  # None: EOF, wsproto reports 1006 and CLOSED
            for event in ws.events():
                if time.monotonic() >= yield_at:  # a 64 KiB read holds ~5,000 messages
                    yield_at = _yield_to_the_loop()
                if not self._handle(event):
                    return

    def _handle(self, event: Event) -> bool:
        """Answer one wsproto event; False once the session is over."""
        ws = self._ws
        if isinstance(event, TextMessage):
            if ws.state is ConnectionState.OPEN:  # else: the rest of a message after our close
                self._receive_text(event)
        elif isinstance(event, BytesMessage):
            if ws.state is ConnectionState.OPEN:
                self._state.bad += 1
                self._close(contract.WS_CLOSE_UNSUPPORTED_DATA, "binary message")
        elif isinstance(event, Ping):
            if ws.state is ConnectionState.OPEN:
                self._send(event.response())
        elif isinstance(event, CloseConnection):
            if ws.state is ConnectionState.REMOTE_CLOSING:
                # The client closes: answer as aiohttp does (1000), then we are done.
                self._send(CloseConnection(code=contract.WS_CLOSE_NORMAL))
            elif ws.state is ConnectionState.OPEN:
                # wsproto could not parse the stream (bad UTF-8, bad framing, a frame over
                # the size limit): fail the connection with its code; the parser cannot go
                # on, the client may still be sending.
                self._state.bad += 1
                self._close(event.code, event.reason)
                self._linger()
                return False
            else:
                return False  # our close was answered, or the peer vanished
        return True

    def _receive_text(self, event: TextMessage) -> None:
        """Add a text frame to the message; a whole message is judged, then stored."""
        state = self._state
        parts = self._parts
        # Judge the size as it arrives: an oversized message is never buffered.
        self._message_bytes += _utf8_size(event.data)
        if self._message_bytes > contract.WS_MAX_MESSAGE_BYTES:
            parts.clear()
            state.bad += 1
            self._close(contract.WS_CLOSE_TOO_BIG, "message too big")
            return
        parts.append(event.data)
        if not event.message_finished:
            return
        text = parts[0] if len(parts) == 1 else "".join(parts)
        parts.clear()
        self._message_bytes = 0
        close_code = take_message(state, self._sink, text)
        if close_code == contract.WS_CLOSE_TRY_AGAIN_LATER:  # the sink's queue is full
            self._close(close_code, "sink busy")
        elif close_code is not None:
            self._close(close_code)

    def _linger(self) -> None:
        """After a close that failed the connection: half-close (the client reads the close
        frame, then EOF), and read and drop what it still sends until it closes, at most
        WS_LINGER_S and WS_LINGER_MAX_BYTES (servers.core.websocket: closing on unread bytes
        resets the connection, and over TLS the reset cost clients the 1009)."""
        # On an SSL socket this drops TLS (no close_notify): what is drained is not read.
        self._sock.shutdown(socket.SHUT_WR)
        linger = LingerDrain(time.monotonic())
        yield_at = time.monotonic() + _YIELD_EVERY_S
        while True:
            remaining_s = linger.remaining_s(time.monotonic())
            if remaining_s <= 0:
                return
            self._sock.settimeout(remaining_s)
            try:
                data = self._sock.recv(WS_READ_BYTES)
            except BlockingIOError:  # eventlet's SSL socket, TLS dropped, does not wait
                select.select([self._sock], [], [], remaining_s)
                continue
            if not data or not linger.drop(len(data)):
                return
            if time.monotonic() >= yield_at:  # a client sending without pause starves none
                yield_at = _yield_to_the_loop()

    def _read(self) -> bytes:
        """The next bytes from the client (b"": EOF), straight from the socket.

        Not through a buffered reader: its `read1` allocates its 64 KB result before it
        waits, so every idle session held one. The green socket's `recv` waits for data
        before it allocates: this bought 4.4 KB per idle WebSocket on gevent and eventlet
        alike (the server's RSS slope over 1,000 idle connections; tracemalloc: 64 KB
        fewer bytes allocated per connection, most of them never touched).
        """
        if self._received:
            received, self._received = self._received, b""
            return received
        return self._sock.recv(WS_READ_BYTES)

    def _send(self, event: Event) -> None:
        with self._send_lock:
            if self._ws.state in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
                self._sock.sendall(self._ws.send(event))

    def _close(self, code: int, reason: str = "") -> None:
        with self._send_lock:
            self._close_locked(code, reason)

    def _close_locked(self, code: int, reason: str = "") -> None:
        if self._ws.state is ConnectionState.OPEN:
            self._sock.sendall(self._ws.send(CloseConnection(code=code, reason=reason)))
