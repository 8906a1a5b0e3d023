"""The wire contract on aiohttp.web (asyncio or uvloop).

The backends (`/gridfs`, `/mc`, the memcached socket service) are
servers/runtimes/asyncio/backends.py, shared with tornado; `/files` is aiohttp's own
FileResponse.

TLS (h1-tls) is aiohttp's `ssl_context` on the site; aiohttp.web speaks HTTP/1.1 only.
"""

from __future__ import annotations

import asyncio
import ssl
import weakref
from typing import Any

from aiohttp import WSMsgType, web
from aiohttp.http_websocket import WebSocketError

from servers import contract
from servers.contract import ServerOptions
from servers.core import memcache, static
from servers.core.backends import BackendUnavailable
from servers.core.body_limit import TOO_LARGE_BODY, TOO_LARGE_STATUS, declared_too_large
from servers.core.shutdown import CONNECTIONS_GRACE_S, WS_SHUTDOWN_REASON
from servers.core.sinks import SinkUnavailable
from servers.core.state import ServerState, TelemetryTimers
from servers.core.tls import server_context
from servers.core.websocket import (
    WS_LINGER_S,
    ClientFrameWatch,
    LingerDrain,
    peer_close_code_valid,
    websocket_handshake_status,
)
from servers.core.ws_messages import take_message
from servers.frameworks import Worker
from servers.runtimes.asyncio.aiohttp_workloads import add_workload_routes
from servers.runtimes.asyncio.backends import AsyncBackends
from servers.runtimes.asyncio.loop import run_on_asyncio, until_stopped
from servers.runtimes.asyncio.sinks import AsyncSink, open_async_sink


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


def _not_found() -> web.Response:
    return web.Response(
        status=404, body=contract.NOT_FOUND_BODY, content_type=contract.TEXT_CONTENT_TYPE
    )


def _unavailable(error: BackendUnavailable) -> web.Response:
    return web.Response(
        status=contract.UNAVAILABLE_STATUS,
        body=contract.BACKEND_UNAVAILABLE_BODY,
        content_type=contract.TEXT_CONTENT_TYPE,
    )


def _too_large() -> web.Response:
    """413, then close: the rest of the body is not read (aiohttp would linger on it)."""
    response = web.Response(
        # text=: aiohttp adds "; charset=utf-8", as it always did on this reply
        status=TOO_LARGE_STATUS,
        text=TOO_LARGE_BODY.decode(),
        content_type="text/plain",
    )
    response.force_close()
    return response


def _closed(request: web.Request) -> web.Response:
    """Close the connection at once; the response returned is never sent (aiohttp finds
    the transport closing and stops), and the rest of the body is not lingered on."""
    transport = request.transport
    if transport is not None:
        transport.close()
    return web.Response(status=408)


class _Routes:
    """The contract's handlers, sharing the process's state, sink and backends.

    `/log` reads its body within `body_timeout_s` of its handler starting (when the head
    arrived, unless earlier requests on the connection were still being answered) or
    closes the connection: the contract's body deadline.
    """

    def __init__(
        self, state: ServerState, sink: AsyncSink, backends: AsyncBackends, body_timeout_s: float
    ) -> None:
        self.state = state
        self.sink = sink
        self.backends = backends
        self.body_timeout_s = body_timeout_s
        self.websockets: weakref.WeakSet[_WebSocketResponse] = weakref.WeakSet()

    async def text(self, request: web.Request) -> web.Response:
        self.state.requests += 1
        return web.Response(body=contract.TEXT_BODY, content_type=contract.TEXT_CONTENT_TYPE)

    async def counter(self, request: web.Request) -> web.Response:
        state = self.state
        state.requests += 1
        return web.Response(body=state.counter_payload(), content_type=contract.JSON_CONTENT_TYPE)

    async def log(self, request: web.Request) -> web.Response:
        state = self.state
        state.requests += 1
        if declared_too_large(request.content_length):
            # Before reading any of it: a declared 2 GiB that never comes is refused at
            # once (aiohttp's own check, in read(), waits for the bytes).
            return _too_large()
        try:
            if request.content.is_eof():  # the whole body came with the head: no timer
                raw_body = await request.read()
            else:
                async with asyncio.timeout(self.body_timeout_s):
                    raw_body = await request.read()
        except web.HTTPRequestEntityTooLarge:  # a chunked body past client_max_size
            return _too_large()
        except TimeoutError:  # the body missed its deadline: close, store nothing
            return _closed(request)
        # Each header byte one character (ISO-8859-1), as on every other server: aiohttp's
        # own strings hold bytes that are not UTF-8 as surrogates, which no record can store.
        headers: dict[str, str] = {}
        for name, value in request.raw_headers:
            headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        record = state.request_record(request.method, request.path, headers, raw_body)
        try:
            await self.sink.store_and_wait(record)
        except SinkUnavailable:
            return web.Response(
                status=contract.UNAVAILABLE_STATUS,
                body=contract.SINK_UNAVAILABLE_BODY,
                content_type=contract.TEXT_CONTENT_TYPE,
            )
        return web.Response(body=contract.LOG_REPLY_BODY, content_type=contract.TEXT_CONTENT_TYPE)

    async def files(self, request: web.Request) -> web.StreamResponse:
        self.state.requests += 1
        found = static.file_path(self.backends.files_dir, request.match_info["name"])
        if found is None:
            return _not_found()
        # aiohttp's own idiom: it opens the file on a worker thread and sends it with
        # loop.sendfile (asyncio) or reads it there in chunks (uvloop has no sendfile), so
        # no file blocks the loop. The thread hops cost: an 8.5 KB file measured 4,000
        # req per server CPU-second (asyncio and uvloop) against 10,000 when read on the
        # loop — but a plain read is not how aiohttp serves files, and this study compares
        # idioms. It also answers conditional and Range requests (304, 206) by itself.
        return web.FileResponse(found.path, headers={"Content-Type": found.content_type})

    async def gridfs(self, request: web.Request) -> web.Response:
        self.state.requests += 1
        try:
            found = await self.backends.gridfs.read(request.match_info["name"])
        except BackendUnavailable as error:
            return _unavailable(error)
        if found is None:
            return _not_found()
        return web.Response(body=found.data, content_type=found.content_type)

    async def mc(self, request: web.Request) -> web.Response:
        self.state.requests += 1
        # The path as yarl decoded it; surrogatepass never raises, and a non-ASCII key
        # fails valid_key either way.
        key = request.match_info["key"].encode("utf-8", "surrogatepass")
        if not memcache.valid_key(key):
            return _not_found()
        try:
            value = await self.backends.memcached.get(key)
        except BackendUnavailable as error:
            return _unavailable(error)
        if value is None:
            return _not_found()
        return web.Response(body=value, content_type=contract.MC_CONTENT_TYPE)

    async def websocket(self, request: web.Request) -> web.StreamResponse:
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

    async def close_websockets(self, app: web.Application) -> None:
        """Shutdown: 1001 to every open WebSocket, no lingering close holding it up."""
        for ws in list(self.websockets):
            if ws.stream is not None:
                ws.stream.end()
        for ws in list(self.websockets):
            await ws.close(code=contract.WS_CLOSE_GOING_AWAY, message=WS_SHUTDOWN_REASON.encode())


def make_app(
    state: ServerState, sink: AsyncSink, backends: AsyncBackends, body_timeout_s: float
) -> web.Application:
    """The contract's routes; aiohttp answers unknown paths 404 and wrong methods 405."""
    routes = _Routes(state, sink, backends, body_timeout_s)
    app = web.Application(client_max_size=contract.LOG_MAX_BODY_BYTES)
    app.router.add_get(contract.ROUTE_TEXT, routes.text)
    app.router.add_get(contract.ROUTE_COUNTER, routes.counter)
    app.router.add_route("*", contract.ROUTE_LOG, routes.log)
    # Everything after the prefix, slashes and all, so "/files/" and "/files//abs" reach
    # the handler and get the contract's 404 (static.valid_name refuses them).
    app.router.add_get(contract.ROUTE_FILES_PREFIX + "{name:.*}", routes.files)
    app.router.add_get(contract.ROUTE_GRIDFS_PREFIX + "{name:.*}", routes.gridfs)
    app.router.add_get(contract.ROUTE_MEMCACHED_PREFIX + "{key:.*}", routes.mc)
    app.router.add_get(contract.ROUTE_WEBSOCKET, routes.websocket)
    add_workload_routes(app, state, body_timeout_s, _too_large, _closed)
    app.on_shutdown.append(routes.close_websockets)
    return app


class _TLSSockSite(web.SockSite):
    """aiohttp's SockSite with TLS (`ssl_context`), the handshake held to the head deadline.

    SockSite leaves asyncio's handshake timeout at its default (60 s), and aiohttp meets a
    connection only once its handshake is done (`connection_made`), so a client stopping
    mid-handshake would outlive the contract's head deadline by far. This start is
    SockSite's with the loop's `ssl_handshake_timeout` set.
    """

    def __init__(
        self, runner: web.AppRunner, sock: Any, context: ssl.SSLContext, handshake_timeout_s: float
    ) -> None:
        super().__init__(runner, sock, ssl_context=context)
        self._handshake_timeout_s = handshake_timeout_s

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            server,
            sock=self._sock,
            ssl=self._ssl_context,
            backlog=self._backlog,
            ssl_handshake_timeout=self._handshake_timeout_s,
        )


def _site(runner: web.AppRunner, listener: Any, options: ServerOptions) -> web.SockSite:
    """Where the runner serves: the listener, cleartext (h1) or over TLS (h1-tls)."""
    if not options.tls:
        return web.SockSite(runner, listener)
    return _TLSSockSite(runner, listener, server_context(options), options.head_timeout_s)


async def _serve(worker: Worker) -> None:
    options, listener, state = worker.options, worker.listener, worker.state
    mc_listener = worker.mc_listener
    loop = asyncio.get_running_loop()
    sink = open_async_sink(options, state)
    backends = AsyncBackends(options, state)
    head_timeout_s = options.head_timeout_s
    runner = web.AppRunner(
        make_app(state, sink, backends, options.body_timeout_s),
        handle_signals=False,
        access_log=None,
        shutdown_timeout=CONNECTIONS_GRACE_S,
        # The head deadline after a response: aiohttp closes a connection still waiting
        # for a whole head this long after its last response; received bytes do not
        # move it, so it is a deadline and not an idle timer.
        keepalive_timeout=head_timeout_s,
        # A body no handler reads (a GET's) is read and dropped after the response for
        # at most this long, then the connection closed: the body deadline there.
        lingering_time=options.body_timeout_s,
    )
    await runner.setup()
    server = runner.server
    assert server is not None
    made, lost = server.connection_made, server.connection_lost
    # The head deadline of a new connection: aiohttp arms its keep-alive timer at
    # connection open only from 3.14.4 on, so this timer stands in for it before that.
    first_head_timers: dict[Any, asyncio.TimerHandle] = {}

    def close_if_no_head(handler: Any, transport: asyncio.Transport) -> None:
        del first_head_timers[handler]
        # RequestHandler._request_count (private; aiohttp 3.9 to 3.14.5): the request
        # heads it has parsed on this connection.
        if handler._request_count == 0:
            transport.close()

    def connection_made(handler, transport) -> None:
        state.connection_opened()
        made(handler, transport)
        first_head_timers[handler] = loop.call_later(
            head_timeout_s, close_if_no_head, handler, transport
        )

    def connection_lost(handler, exc) -> None:
        state.connection_closed()
        timer = first_head_timers.pop(handler, None)
        if timer is not None:  # the handler is freed now, not when the timer is due
            timer.cancel()
        lost(handler, exc)

    server.connection_made = connection_made  # type: ignore[method-assign]
    server.connection_lost = connection_lost  # type: ignore[method-assign]
    await _site(runner, listener, options).start()
    if mc_listener is not None:
        await backends.start_socket_service(mc_listener)

    timers = TelemetryTimers(state, loop.call_later)
    timers.start()
    await until_stopped()
    backends.stop_accepting()
    await runner.cleanup()
    await backends.aclose()
    await sink.aclose()
    timers.stop()
    state.emit_telemetry()


def serve(worker: Worker) -> None:
    """Serve `worker` (see servers.frameworks) on aiohttp's web runner, on asyncio or uvloop."""
    run_on_asyncio(worker.options.loop, _serve(worker))
