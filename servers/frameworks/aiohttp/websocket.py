"""`/ws` on aiohttp: the handler (the contract's handshake, then each message judged until a
close), the stream in front of aiohttp's parser (unmasked frames refused, the lingering
close), and the response that leaves a failed stream's transport open for that linger."""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from aiohttp import WSMsgType, web
from aiohttp.http_websocket import WebSocketError

from servers import contract
from servers.core.shutdown import WS_SHUTDOWN_REASON
from servers.core.state import ServerState
from servers.core.websocket import (
    WS_LINGER_S,
    ClientFrameWatch,
    LingerDrain,
    peer_close_code_valid,
    websocket_handshake_status,
)
from servers.core.ws_messages import take_message
from servers.runtimes.asyncio.sinks import AsyncSink


class _ClientStream:
    """Stands in front of aiohttp's WebSocket parser (the protocol's payload parser).

    Masks: aiohttp's parser takes unmasked client frames; RFC 6455 §5.1 says close with
    1002. This walks the frame headers (`ClientFrameWatch`) and, at an unmasked one, fails
    the stream the way the parser fails it for its own errors (the handler then sees an
    ERROR message, aiohttp writes a close frame with the error's code). The walk costs a
    few Python operations per frame.

    The lingering close (servers.core.websocket.WS_LINGER_S): once the stream failed (the
    parser's 1009, 1002, 1007, or an unmasked frame), aiohttp would close the socket right
    after its close frame, on a client maybe still sending (an oversized message's
    payload): the reset cost verify's ws-1009 its close frame over TLS (2 in 30 checks).
    So a failed stream is drained instead: what comes is walked and dropped, never
    buffered, until the client's close frame has come (it has ours then), or EOF, or
    WS_LINGER_MAX_BYTES, or `linger`'s WS_LINGER_S.
    """

    def __init__(self, parser: Any, queue: Any) -> None:
        self._parser = parser
        self._queue = queue
        self._watch = ClientFrameWatch()
        self.failed = False
        self._walking = True  # False past an unmasked frame: the walk lost its place
        self._over = False  # the lingering close is over (or cut short)
        self._linger = LingerDrain()  # its time bound: `linger`'s timeout
        self._waiter: asyncio.Future[None] | None = None

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        # Never EOF to aiohttp's protocol: at EOF it would drop what comes, unwalked.
        if self.failed:
            if not self._over:
                self._drain(bytes(data))
            return False, b""
        if not self._watch.feed(bytes(data)):
            self.failed, self._walking = True, False
            self._queue.set_exception(
                WebSocketError(contract.WS_CLOSE_PROTOCOL_ERROR, "unmasked client frame")
            )
            return False, b""
        result = self._parser.feed_data(data)
        if result[0]:  # the parser failed the stream (its error is in the queue)
            self.failed = True
            return False, b""
        return result

    def _drain(self, data: bytes) -> None:
        more = self._linger.drop(len(data))
        if self._walking:
            self._walking = self._watch.feed(data)
        if self._watch.close_came or not more:
            self.end()

    def feed_eof(self) -> None:  # the connection is lost
        self.end()
        self._parser.feed_eof()

    def end(self) -> None:
        """End the lingering close, or cut it short before it starts (shutdown)."""
        self._over = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def linger(self, transport: asyncio.Transport | None) -> None:
        """After the close frame of a failed stream: half-close where the transport can
        (cleartext; asyncio's and uvloop's TLS transports cannot), then wait until the
        drain is over, or WS_LINGER_S. A client still sending then is cut off (abort):
        uvloop's TLS close would drain it for up to its 30 s shutdown timeout. Otherwise
        aiohttp closes the transport when the handler returns."""
        if transport is None or transport.is_closing():
            return
        # the close frame may have come with the failing frame: nothing more comes then
        if not (self._over or self._watch.close_came):
            if transport.can_write_eof():
                transport.write_eof()
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(WS_LINGER_S):
                    await self._waiter
            except TimeoutError:
                pass
        if not self._watch.close_came and not transport.is_closing():
            transport.abort()


class _WebSocketResponse(web.WebSocketResponse):
    """aiohttp's WebSocketResponse, but a failed stream's transport is left open for its
    lingering close (`_ClientStream`): aiohttp's close() closes it at once when its reader
    holds the parser's error, in `_set_code_close_transport` (private, as in aiohttp
    3.14.5; an aiohttp without it would close at once again, as before the linger)."""

    stream: _ClientStream | None = None

    def _set_code_close_transport(self, code: Any) -> None:
        if self.stream is not None and self.stream.failed:
            return  # the handler lingers, then returns: aiohttp closes the transport then
        super()._set_code_close_transport(code)


def _client_stream(request: web.Request, ws: _WebSocketResponse) -> _ClientStream:
    protocol: Any = request.protocol
    stream = _ClientStream(protocol._payload_parser, ws._reader)
    protocol._payload_parser = ws.stream = stream
    return stream


def _break_exception_cycle(ws: web.WebSocketResponse) -> None:
    """Let a closed WebSocket be freed by its reference count, not by a full collection.

    A client gone without a close frame (dropped) fails aiohttp's own close reply: the
    WebSocketResponse keeps that error (`exception()`), whose traceback holds the frames
    of `close`, whose `self` is the WebSocketResponse — a cycle that took the connection's
    ~47 objects (request, protocol, transport, socket, parser, queue) with it, for the
    cyclic collector to find. Dropping 3,000 at once left 141,000 objects to one gen-2
    collection: a 532 ms pause 2.5 s after the storm (busy 2-core machine). The traceback
    is not read after the handler returns.
    """
    error = ws.exception()
    seen: set[int] = set()
    while error is not None and id(error) not in seen:  # its chain: EofStream before it
        seen.add(id(error))
        error.__traceback__ = None
        error = error.__context__


class WebSocketRoute:
    """`GET /ws`, and at shutdown the 1001 to every WebSocket still open."""

    def __init__(self, state: ServerState, sink: AsyncSink) -> None:
        self.state = state
        self.sink = sink
        self.websockets: weakref.WeakSet[_WebSocketResponse] = weakref.WeakSet()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """`GET /ws`: the contract's handshake, then each message judged until a close."""
        self.state.requests += 1
        refusal = websocket_handshake_status(
            request.headers.get("Origin"), request.headers.get("Sec-WebSocket-Protocol")
        )
        if refusal is not None:
            return web.Response(status=refusal, text=f"{refusal}")
        ws = _WebSocketResponse(
            protocols=(contract.WS_SUBPROTOCOL,),
            max_msg_size=contract.WS_MAX_MESSAGE_BYTES,
            compress=False,
            autoclose=False,  # the client's close frame is judged in _read_messages
        )
        await ws.prepare(request)
        stream = _client_stream(request, ws)
        self.websockets.add(ws)
        await self._read_messages(ws)
        if stream.failed:
            await stream.linger(request.transport)
        _break_exception_cycle(ws)
        return ws

    async def _read_messages(self, ws: _WebSocketResponse) -> None:
        """Each message judged and stored (take_message) until one earns a close, the
        client closes, or aiohttp's parser fails the stream."""
        state = self.state
        while True:
            message = await ws.receive()
            if message.type == WSMsgType.CLOSE:
                # aiohttp's reader takes 1006 and codes from 5000 on, which a peer may
                # never send (RFC 6455 §7.4): 1002 for them, 1000 for the others (0: none)
                if message.data == 0 or peer_close_code_valid(message.data):
                    await ws.close(drain=False)
                else:
                    state.bad += 1
                    await ws.close(code=contract.WS_CLOSE_PROTOCOL_ERROR, drain=False)
                return
            if message.type in (WSMsgType.CLOSING, WSMsgType.CLOSED):
                return
            if message.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                # ERROR: aiohttp already sent its close frame (1009 for an oversized message)
                state.bad += 1
                return
            close_code = take_message(state, self.sink, message.data)
            if close_code is not None:
                await ws.close(code=close_code)
                return

    async def close_all(self, app: web.Application) -> None:
        """Shutdown: 1001 to every open WebSocket, no lingering close holding it up."""
        for ws in list(self.websockets):
            if ws.stream is not None:
                ws.stream.end()
        for ws in list(self.websockets):
            await ws.close(code=contract.WS_CLOSE_GOING_AWAY, message=WS_SHUTDOWN_REASON.encode())
