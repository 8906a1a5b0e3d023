"""`/ws` on tornado: the handler (the contract's handshake, each message to the sink) and the
protocol under it, which applies the RFC 6455 rules tornado does not and lingers on a
failing close (servers.core.websocket)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import tornado.iostream
import tornado.websocket

from servers import contract
from servers.core.state import ServerState
from servers.core.websocket import (
    WS_LINGER_S,
    LingerDrain,
    frame_header_error,
    peer_close_code_valid,
    websocket_handshake_status,
)
from servers.core.ws_messages import take_message


class _CountingProtocol(tornado.websocket.WebSocketProtocol13):
    """Tornado refuses a message over `websocket_max_message_size` itself, closing with
    1009 and tearing the connection down without telling the handler why; count it here.

    Where tornado does not apply RFC 6455's rules (servers.core.websocket) this applies
    them: an unmasked client frame closes with 1002 (tornado takes it), and so does any
    other broken framing (RSV bits, a reserved opcode, a fragmented or oversized control
    frame, a misplaced continuation), invalid UTF-8 closes with 1007, and so does a close
    reason that is not UTF-8 (tornado drops these connections without a close frame), and
    a close frame with an invalid code is answered 1002 (tornado echoes the code, 999
    included). Each counts in `bad`, as on the other servers.

    Such a failing close lingers (servers.core.websocket.WS_LINGER_S): tornado follows its
    close frame with `_abort`, closing the socket at once on what the client is still
    sending (an oversized message's payload), and the kernel's reset cost the client the
    close frame over TLS (verify's ws-1009, h1-tls: 3 in 30 checks recorded 1006). Here
    that `_abort` is deferred: the frame loop half-closes, drains, and only then aborts,
    before the handler's on_close, so a shutdown's close(1001) still ends the linger.
    """

    _frame_start = False  # the next _read_bytes reads a frame's first two bytes
    _failing = False  # a failing close frame is written: the next _abort lingers first
    _linger_pending = False  # that _abort came: _receive_frame lingers, then aborts

    def close(self, code: int | None = None, reason: str | None = None) -> None:
        if code == contract.WS_CLOSE_TOO_BIG and not self.server_terminated:
            # Only tornado's parser closes with 1009 (a frame over the limit), then _aborts.
            self._count_bad()
            self._failing = True
        super().close(code, reason)

    def _abort(self) -> None:
        if self._failing and not self.stream.closed():
            # Stop the frame loop as tornado's _abort does, but leave the stream open.
            self._failing = False
            self._linger_pending = True
            self.client_terminated = self.server_terminated = True
            return
        super()._abort()

    async def _linger(self) -> None:
        """Flush the close frame, half-close, drop what the client still sends until it
        closes (or WS_LINGER_S, WS_LINGER_MAX_BYTES), then tear down as tornado's _abort."""
        stream = self.stream
        # The deadline closes the stream, which fails the pending write or read (tornado's
        # futures are not cancelled under it).
        deadline = stream.io_loop.call_later(WS_LINGER_S, stream.close)
        try:
            await stream.write(b"")  # resolves once the close frame is in the kernel
            # The client reads the close frame, then EOF. An SSLSocket drops its TLS state
            # here (no close_notify): what is read after is raw TLS records, dropped.
            stream.socket.shutdown(socket.SHUT_WR)
            linger = LingerDrain()  # its time bound: the deadline above
            # the client's EOF: StreamClosedError
            while linger.drop(len(await stream.read_bytes(64 * 1024, partial=True))):
                pass
        except (tornado.iostream.StreamClosedError, OSError):
            pass
        finally:
            stream.io_loop.remove_timeout(deadline)
            super()._abort()

    def _count_bad(self) -> None:
        handler = self.handler
        assert isinstance(handler, WebSocket)
        handler.state.bad += 1

    async def _receive_frame(self) -> None:
        self._frame_start = True
        try:
            await super()._receive_frame()
        finally:
            if self._linger_pending:
                self._linger_pending = False
                await self._linger()

    async def _read_bytes(self, n: int) -> bytes:
        data = await super()._read_bytes(n)
        if self._frame_start:
            self._frame_start = False
            inside_message = self._fragmented_message_buffer is not None
            error = frame_header_error(data, inside_message)
            if error is not None:
                self._refuse(contract.WS_CLOSE_PROTOCOL_ERROR, error)
                raise tornado.iostream.StreamClosedError()  # the frame loop ends here
        return data

    def _refuse(self, code: int, reason: str) -> None:
        """Close with `code` and stop reading (tornado's own way for 1009)."""
        self._count_bad()
        if not self.server_terminated:
            super().close(code, reason)
            self._failing = True
        self._abort()

    def _handle_message(self, opcode: int, data: bytes) -> asyncio.Future[None] | None:
        if self.client_terminated:
            return None
        if opcode == 0x1 and not self._frame_compressed:  # compression is never negotiated
            try:
                decoded = data.decode("utf-8")
            except UnicodeDecodeError:
                self._refuse(contract.WS_CLOSE_INVALID_PAYLOAD, "invalid UTF-8")
                return None
            # tornado's own text branch, without decoding twice
            self._message_bytes_in += len(data)
            return self._run_callback(self.handler.on_message, decoded)
        if opcode == 0x8 and data:
            code = int.from_bytes(data[:2]) if len(data) >= 2 else None
            if code is None or not peer_close_code_valid(code):
                self._refuse(contract.WS_CLOSE_PROTOCOL_ERROR, "invalid close code")
                return None
            try:
                data[2:].decode("utf-8")
            except UnicodeDecodeError:
                self._refuse(contract.WS_CLOSE_INVALID_PAYLOAD, "close reason not UTF-8")
                return None
        return super()._handle_message(opcode, data)


class WebSocket(tornado.websocket.WebSocketHandler):
    """`GET /ws`: the contract's handshake rules, then one sink record per text message."""

    def initialize(self, state: ServerState, sink: Any, websockets: set[WebSocket]) -> None:
        self.state = state
        self.sink = sink
        self.websockets = websockets
        self.closed_future: asyncio.Future[None] | None = None

    async def get(self, *args: Any, **kwargs: Any) -> None:
        self.state.requests += 1
        headers = self.request.headers
        refusal = websocket_handshake_status(
            headers.get("Origin"), headers.get("Sec-WebSocket-Protocol")
        )
        if refusal is not None:
            self.set_status(refusal)
            self.finish(str(refusal))
            return
        # Returns when the WebSocket has closed: tornado runs its frame loop in here.
        await super().get(*args, **kwargs)

    def check_origin(self, origin: str) -> bool:
        return True  # get() has already applied the contract's Origin rule

    def select_subprotocol(self, subprotocols: list[str]) -> str | None:
        return contract.WS_SUBPROTOCOL  # get() has checked that the client offered it

    def get_websocket_protocol(self) -> tornado.websocket.WebSocketProtocol | None:
        protocol = super().get_websocket_protocol()
        if isinstance(protocol, tornado.websocket.WebSocketProtocol13):
            return _CountingProtocol(self, False, protocol.params)
        return protocol

    def open(self, *args: Any, **kwargs: Any) -> None:
        # Tornado leaves Nagle on once an HTTP exchange is over; a WebSocket wants it off.
        self.set_nodelay(True)
        self.closed_future = asyncio.get_running_loop().create_future()
        self.websockets.add(self)

    def on_message(self, message: str | bytes) -> None:
        if self.ws_connection is None:
            return  # we already closed it; tornado still delivers frames that were in flight
        close_code = take_message(self.state, self.sink, message)
        if close_code is not None:
            self.close(close_code)

    def on_close(self) -> None:
        self.websockets.discard(self)
        if self.closed_future is not None and not self.closed_future.done():
            self.closed_future.set_result(None)
