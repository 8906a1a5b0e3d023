"""The wire contract on tornado.web (asyncio or uvloop).

TLS (h1-tls) is tornado's own: HTTPServer's `ssl_options` is the SSLContext of
servers.core.tls. Tornado speaks HTTP/1.1 only (no HTTP/2 in tornado.httpserver).

The backends (`/gridfs`, `/mc`, the memcached socket service) are
servers/runtimes/asyncio/backends.py, shared with aiohttp; `/files` reads the file as
tornado's StaticFileHandler does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

import tornado.httpserver
import tornado.iostream
import tornado.web
import tornado.websocket

from servers import contract
from servers.core import memcache, static
from servers.core.backends import BackendUnavailable
from servers.core.sinks import SinkUnavailable
from servers.core.state import ServerState, TelemetryTimers
from servers.core.tls import server_context
from servers.core.websocket import (
    WS_LINGER_MAX_BYTES,
    WS_LINGER_S,
    frame_header_error,
    peer_close_code_valid,
    websocket_close_code,
    websocket_handshake_status,
)
from servers.frameworks import Worker
from servers.runtimes.asyncio.backends import AsyncBackends
from servers.runtimes.asyncio.loop import run_on_asyncio, until_stopped
from servers.runtimes.asyncio.sinks import open_async_sink
from servers.runtimes.asyncio.tornado_workloads import workload_handlers


class _ContractHandler(tornado.web.RequestHandler):
    """Base of the routes: the process's state and sink, and no ETag.

    Tornado hashes every GET body into an ETag and answers a matching If-None-Match with
    304; the contract's replies are not cacheable (a counter must never be a 304), and the
    hash is pure cost on the hot path.
    """

    def initialize(self, state: ServerState, sink: Any) -> None:
        self.state = state
        self.sink = sink

    def compute_etag(self) -> None:
        return None


class TextHandler(_ContractHandler):
    def get(self) -> None:
        self.state.requests += 1
        self.set_header("Content-Type", contract.TEXT_CONTENT_TYPE)
        self.finish(contract.TEXT_BODY)

    head = get  # as aiohttp's add_get: HEAD is answered by the GET handler


class CounterHandler(_ContractHandler):
    def get(self) -> None:
        self.state.requests += 1
        self.set_header("Content-Type", contract.JSON_CONTENT_TYPE)
        self.finish(self.state.counter_payload())

    head = get


@tornado.web.stream_request_body
class LogHandler(_ContractHandler):
    """`ANY /log`: every method tornado's handlers support stores one record.

    The body is streamed in so that the contract's limit holds as it arrives: a declared
    Content-Length over `contract.LOG_MAX_BODY_BYTES` is answered 413 before any of the
    body is read (then the connection is closed), a chunked body once it grows past it
    (finishing a request whose body is unread makes tornado close the connection).
    """

    def prepare(self) -> None:
        self.chunks: list[bytes] = []
        self.body_bytes = 0
        # Tornado judges the Content-Length only once this returns (two unequal ones are
        # joined here as "0,27": its 400 then); a single length is digits by now.
        declared = self.request.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > contract.LOG_MAX_BODY_BYTES:
            self.too_large()
            # Tornado would go on to read the body (or answer a second time, 400, past its
            # own 100 MiB limit): take the stream and close it once the 413 is out.
            stream = self.request.connection.detach()
            stream.write(b"").add_done_callback(lambda _: stream.close())

    def data_received(self, chunk: bytes) -> None:
        if self._finished:
            return
        self.body_bytes += len(chunk)
        if self.body_bytes > contract.LOG_MAX_BODY_BYTES:
            self.chunks.clear()
            self.too_large()
            return
        self.chunks.append(chunk)

    def too_large(self) -> None:
        self.state.requests += 1
        self.set_status(413)
        self.set_header("Connection", "close")
        self.set_header("Content-Type", contract.TEXT_CONTENT_TYPE)
        self.finish(b"413: Request Entity Too Large")

    async def store(self) -> None:
        request = self.request
        self.state.requests += 1
        body = b"".join(self.chunks).decode("utf-8", "replace")
        record = self.state.make_record(
            request.method or "", request.path, dict(request.headers), body
        )
        try:
            await self.sink.store_and_wait(record)
        except SinkUnavailable:
            self.set_status(contract.UNAVAILABLE_STATUS)
            self.finish(contract.SINK_UNAVAILABLE_BODY)
            return
        self.set_header("Content-Type", contract.TEXT_CONTENT_TYPE)
        self.finish(contract.LOG_REPLY_BODY)

    get = head = post = put = patch = delete = options = store  # type: ignore[assignment]


# A file up to this size is read on the loop: the file set is ≤ 64 KiB and page-cached, so
# open+read+close costs microseconds, less than a hop to a worker thread and back (tornado's
# StaticFileHandler reads on the loop too): an 8.5 KB file measured 4,300 req per server
# CPU-second against 5,350 for `/`. A larger file is read on the default executor.
INLINE_READ_MAX_BYTES = 256 * 1024


def _read_file(path: str) -> bytes:
    with open(path, "rb", buffering=0) as file:
        return file.readall()


class _BackendHandler(_ContractHandler):
    """Base of `/files`, `/gridfs` and `/mc`: the backends, and the contract's 404 and 503."""

    def initialize(self, state: ServerState, sink: Any, backends: AsyncBackends) -> None:
        super().initialize(state, sink)
        self.backends = backends

    def decode_argument(self, value: bytes, name: str | None = None) -> str:
        # Tornado answers a path that is not UTF-8 with 400; here it is a name no file has
        # (static.valid_name and memcache.valid_key refuse it), so 404 like every server.
        return value.decode("utf-8", "surrogateescape")

    def not_found(self) -> None:
        self.set_status(404)
        self.set_header("Content-Type", contract.TEXT_CONTENT_TYPE)
        self.finish(contract.NOT_FOUND_BODY)

    def unavailable(self, error: BackendUnavailable) -> None:
        self.set_status(contract.UNAVAILABLE_STATUS)
        self.set_header("Content-Type", contract.TEXT_CONTENT_TYPE)
        self.finish(contract.BACKEND_UNAVAILABLE_BODY)


class FilesHandler(_BackendHandler):
    async def get(self, name: str) -> None:
        self.state.requests += 1
        found = static.file_path(self.backends.files_dir, name)
        if found is None:
            self.not_found()
            return
        try:
            if found.size_bytes <= INLINE_READ_MAX_BYTES:
                data = _read_file(found.path)
            else:
                loop = asyncio.get_running_loop()
                data = await loop.run_in_executor(None, _read_file, found.path)
        except OSError:  # removed since the stat
            self.not_found()
            return
        self.set_header("Content-Type", found.content_type)
        self.finish(data)

    head = get


class GridFSHandler(_BackendHandler):
    async def get(self, name: str) -> None:
        self.state.requests += 1
        try:
            found = await self.backends.gridfs.read(name)
        except BackendUnavailable as error:
            self.unavailable(error)
            return
        if found is None:
            self.not_found()
            return
        self.set_header("Content-Type", found.content_type)
        self.finish(found.data)

    head = get


class MemcachedHandler(_BackendHandler):
    async def get(self, name: str) -> None:
        self.state.requests += 1
        key = name.encode("utf-8", "surrogateescape")  # the path's bytes, as sent
        if not memcache.valid_key(key):
            self.not_found()
            return
        try:
            value = await self.backends.memcached.get(key)
        except BackendUnavailable as error:
            self.unavailable(error)
            return
        if value is None:
            self.not_found()
            return
        self.set_header("Content-Type", contract.MC_CONTENT_TYPE)
        self.finish(value)

    head = get


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
            drained = 0
            while drained < WS_LINGER_MAX_BYTES:  # the client's EOF: StreamClosedError
                drained += len(await stream.read_bytes(64 * 1024, partial=True))
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
        close_code = websocket_close_code(message)
        if close_code is None:
            self.state.messages += 1
            taken = self.sink.store(
                self.state.make_record(
                    contract.WEBSOCKET_RECORD_METHOD, contract.ROUTE_WEBSOCKET, {}, message
                )
            )
            if not taken:  # the sink's queue is full: counted in sink_errors
                self.close(contract.WS_CLOSE_TRY_AGAIN_LATER)
            return
        self.state.bad += 1
        self.close(close_code)

    def on_close(self) -> None:
        self.websockets.discard(self)
        if self.closed_future is not None and not self.closed_future.done():
            self.closed_future.set_result(None)


# Tornado's own reply to a malformed request (HTTP1Connection), framed so it can be read.
_BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class _Refusing:
    """A stream that answers a line over its limit (headers over `max_header_size`) with
    400, as tornado answers other malformed requests; tornado's own stream just closes,
    leaving the client a reset and no reason."""

    def close(self, exc_info: Any = False) -> None:
        stream: Any = self
        if (
            isinstance(exc_info, tornado.iostream.UnsatisfiableReadError)
            and not stream.closed()
            and not stream.writing()
        ):
            with contextlib.suppress(OSError):  # ssl.SSLError is one
                stream.socket.send(_BAD_REQUEST)  # non-blocking; an empty buffer takes it
        super().close(exc_info)  # type: ignore[misc]


class _RefusingIOStream(_Refusing, tornado.iostream.IOStream):
    """Cleartext HTTP/1.1 (h1)."""


class _RefusingSSLIOStream(_Refusing, tornado.iostream.SSLIOStream):
    """HTTP/1.1 over TLS (h1-tls): tornado's SSLIOStream does the handshake."""


def _refusing_stream(stream: tornado.iostream.IOStream) -> tornado.iostream.IOStream:
    """The accepted connection's stream as ours: it has done no I/O yet, so its socket is
    rewrapped (TCPServer has no stream-class hook)."""
    if isinstance(stream, tornado.iostream.SSLIOStream):
        # An SSLIOStream asks the loop at once for the moment its handshake may start;
        # ours asks again, so take the first one's request back.
        stream.io_loop.remove_handler(stream.socket)
        return _RefusingSSLIOStream(
            stream.socket,
            max_buffer_size=stream.max_buffer_size,
            read_chunk_size=stream.read_chunk_size,
        )
    return _RefusingIOStream(
        stream.socket,
        max_buffer_size=stream.max_buffer_size,
        read_chunk_size=stream.read_chunk_size,
    )


class CountingHTTPServer(tornado.httpserver.HTTPServer):
    """An HTTPServer that counts open TCP connections, WebSockets included.

    A connection is counted when accepted and uncounted when its socket closes. When a
    WebSocket takes the stream over, tornado's HTTP connection ends (`on_close`) with the
    socket still open; the stream's close callback then uncounts it.
    """

    def initialize(self, *args: Any, state: ServerState, **kwargs: Any) -> None:
        super().initialize(*args, **kwargs)
        self.state = state

    def handle_stream(self, stream: tornado.iostream.IOStream, address: tuple) -> None:
        self.state.connection_opened()
        super().handle_stream(_refusing_stream(stream), address)

    def on_close(self, server_conn: Any) -> None:
        super().on_close(server_conn)
        stream: tornado.iostream.IOStream = server_conn.stream
        if stream.closed():
            self.state.connection_closed()
        else:  # detached by a WebSocket: nobody else uses the stream's close callback now
            stream.set_close_callback(self.state.connection_closed)


class _NoHandshakeWarnings(logging.Filter):
    """Drops tornado's warning for each failed TLS handshake (a scanner, a plaintext
    request on the TLS port): it logs a malformed cleartext request at info level, below
    stderr's, and a failed handshake is the same kind of client error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("SSL Error on")


def _no_access_log(handler: tornado.web.RequestHandler) -> None:
    """Tornado formats a log line per request unless `log_function` replaces it."""


def make_app(
    state: ServerState, sink: Any, websockets: set[WebSocket], backends: AsyncBackends
) -> tornado.web.Application:
    """The contract's routes; tornado answers unknown paths 404 and wrong methods 405."""
    context = {"state": state, "sink": sink}
    backend_context = {**context, "backends": backends}
    return tornado.web.Application(
        [
            (contract.ROUTE_TEXT, TextHandler, context),
            (contract.ROUTE_COUNTER, CounterHandler, context),
            (contract.ROUTE_LOG, LogHandler, context),
            # Everything after the prefix: tornado neither normalises "..", nor decodes the
            # path before matching, so each name reaches the handler and its rules.
            (contract.ROUTE_FILES_PREFIX + "(.*)", FilesHandler, backend_context),
            (contract.ROUTE_GRIDFS_PREFIX + "(.*)", GridFSHandler, backend_context),
            (contract.ROUTE_MEMCACHED_PREFIX + "(.*)", MemcachedHandler, backend_context),
            (contract.ROUTE_WEBSOCKET, WebSocket, {**context, "websockets": websockets}),
            *workload_handlers(context),
        ],
        log_function=_no_access_log,
        websocket_max_message_size=contract.WS_MAX_MESSAGE_BYTES,
    )


async def _serve(worker: Worker) -> None:
    options, listener, state = worker.options, worker.listener, worker.state
    mc_listener = worker.mc_listener
    loop = asyncio.get_running_loop()
    sink = open_async_sink(options, state)
    backends = AsyncBackends(options, state)
    websockets: set[WebSocket] = set()
    server = CountingHTTPServer(
        make_app(state, sink, websockets, backends),
        state=state,
        # The contract's slow-client deadlines (docs/contract.md, "Slow clients"), both
        # deadlines in tornado too: the next head is due this long after the previous
        # response was written (or the connection opened), a body this long after its
        # head. A WebSocket detaches the stream from both.
        idle_connection_timeout=options.head_timeout_s,
        body_timeout=options.body_timeout_s,
        # h1-tls: tornado wraps each accepted socket and runs the handshake on its stream,
        # before the first head, within the head deadline. None: cleartext, as always.
        ssl_options=server_context(options) if options.tls else None,
    )
    if options.tls:
        logging.getLogger("tornado.general").addFilter(_NoHandshakeWarnings())
    listener.setblocking(False)  # tornado accepts in a loop until EWOULDBLOCK
    server.add_sockets([listener])
    if mc_listener is not None:
        await backends.start_socket_service(mc_listener)

    # The asyncio loop's own timers (not tornado's IOLoop wrappers or PeriodicCallback,
    # which skips late runs): the same probe as on aiohttp.
    timers = TelemetryTimers(state, loop.call_later)
    timers.start()
    await until_stopped()

    grace_s = contract.SHUTDOWN_GRACE_S / 2
    server.stop()  # stop accepting
    backends.stop_accepting()
    closed = [ws.closed_future for ws in websockets if ws.closed_future is not None]
    for ws in list(websockets):
        ws.close(contract.WS_CLOSE_GOING_AWAY, "server shutdown")
    if closed:
        await asyncio.wait(closed, timeout=grace_s)
    # Past the grace the process exits anyway and the kernel closes what is left.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(server.close_all_connections(), timeout=grace_s)
    timers.stop()
    await backends.aclose()
    await sink.aclose()
    state.emit_telemetry()


def serve(worker: Worker) -> None:
    """Serve `worker` (see servers.frameworks) on tornado's HTTPServer, on asyncio or uvloop."""
    run_on_asyncio(worker.options.loop, _serve(worker))
