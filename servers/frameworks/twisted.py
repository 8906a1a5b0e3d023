"""The wire contract on twisted.web (epoll reactor), WebSockets through autobahn.

`twisted.web` serves HTTP from a `Resource` tree; `/ws` hands the connection to autobahn's
`WebSocketResource`, which takes the transport over from the HTTP channel. `/log` answers
from a Deferred once the sink stored its record (`servers.runtimes.twisted.sinks`: file writes and
MongoDB inserts on dedicated thread pools). `/gridfs` and `/mc` answer from Deferreds of
`servers.runtimes.twisted.backends` (GridFS on a thread pool, a pool of memcached protocols), which
also holds the memcached socket service (`--mc-socket-port`). `/files` streams the file with
twisted.web's own `NoRangeStaticProducer`. Importing this module installs no reactor:
`serve` installs the epoll reactor itself.

Protocols: the same Site and routes on each. h1-tls and h2 wrap the listener as
`listenSSL` does (servers.runtimes.twisted.tls), with ALPN offering only the case's
protocol. h2 and h2c are twisted.web's own HTTP/2, `H2Connection` (the `h2` package), the
channel twisted.web switches to when ALPN picks "h2": here each connection of an h2 or h2c
case starts as one (h2c is that protocol on a cleartext port: the client's preface comes
first, prior knowledge; twisted.web has no h2c upgrade). WebSockets stay HTTP/1.1's
(twisted.web has no RFC 8441 extended CONNECT).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from io import BytesIO
from types import FunctionType
from typing import Any

from autobahn.twisted.resource import WebSocketResource
from autobahn.twisted.websocket import WebSocketServerFactory, WebSocketServerProtocol
from autobahn.websocket.protocol import TrafficStats
from h2.exceptions import H2Error
from twisted.internet.defer import Deferred, gatherResults, maybeDeferred
from twisted.internet.error import ReactorNotRunning
from twisted.internet.interfaces import IPushProducer
from twisted.logger import (
    FilteringLogObserver,
    LogLevel,
    LogLevelFilterPredicate,
    globalLogBeginner,
    textFileLogObserver,
)
from twisted.python.failure import Failure
from twisted.web._http2 import H2Connection, H2Stream  # twisted.web's HTTP/2 (h2 package)
from twisted.web.error import UnsupportedMethod
from twisted.web.http import HTTPChannel
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site
from twisted.web.static import NoRangeStaticProducer
from zope.interface import implementer

from servers import contract
from servers.contract import ServerOptions
from servers.core import memcache, static
from servers.core.backends import BackendUnavailable, StoredFile
from servers.core.h2_budget import FrameBudget
from servers.core.sinks import SinkUnavailable, mongo_url
from servers.core.state import ServerState, TelemetryTimers
from servers.core.tls import alpn_protocols
from servers.core.websocket import (
    peer_close_code_valid,
    websocket_close_code,
    websocket_handshake_status,
)
from servers.frameworks import Worker
from servers.runtimes.twisted.backends import (
    GridFSReader,
    MemcachedPool,
    MemcachedSocketServiceFactory,
)
from servers.runtimes.twisted.sinks import TwistedSink, open_twisted_sink
from servers.runtimes.twisted.tls import tls_factory
from servers.runtimes.twisted.workloads import add_workload_routes

_TEXT_CONTENT_TYPE = contract.TEXT_CONTENT_TYPE.encode()
_JSON_CONTENT_TYPE = contract.JSON_CONTENT_TYPE.encode()
# LineReceiver drops a connection whose header line is over MAX_LENGTH without a word;
# answer it the way HTTPChannel answers a header block over totalHeadersSize.
_HEADER_TOO_LONG_REPLY = (
    b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
)
_TOO_LARGE_BODY = b"413: Request Entity Too Large"
_TOO_LARGE_REPLY = (
    b"HTTP/1.1 413 Request Entity Too Large\r\nConnection: close\r\n"
    b"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
    % (len(_TOO_LARGE_BODY), _TOO_LARGE_BODY)
)
_DRAIN_POLL_S = 0.010
_LOG_REPLY_LENGTH = b"%d" % len(contract.LOG_REPLY_BODY)
_SINK_UNAVAILABLE_LENGTH = b"%d" % len(contract.SINK_UNAVAILABLE_BODY)
_NOT_FOUND_LENGTH = b"%d" % len(contract.NOT_FOUND_BODY)
_BACKEND_UNAVAILABLE_LENGTH = b"%d" % len(contract.BACKEND_UNAVAILABLE_BODY)
_MC_CONTENT_TYPE = contract.MC_CONTENT_TYPE.encode()


# -- HTTP: site, channel, request ---------------------------------------------------------
class ContractRequest(Request):
    """A twisted.web request whose body stays in memory, and within the contract's limit.

    twisted.web takes a body of any size (150 MiB measured: 200, 656 MiB RSS). A declared
    Content-Length over `contract.LOG_MAX_BODY_BYTES` is answered 413 before any of the
    body is read, a chunked body once it grows past it; the connection is then closed
    and the request never reaches a route (the limit holds on every route: only `/log`
    takes a body).
    """

    _refused = False
    _body_bytes = 0

    def gotLength(self, length: int | None) -> None:
        # twisted.web spools bodies over 100 kB (and every chunked body) to a temporary
        # file: blocking disk I/O on the reactor.
        self.content = BytesIO()
        if length is not None and length > contract.LOG_MAX_BODY_BYTES:
            self._refuse_too_large()

    def handleContentChunk(self, data: bytes) -> None:
        if self._refused:
            return
        self._body_bytes += len(data)
        if self._body_bytes > contract.LOG_MAX_BODY_BYTES:
            self._refuse_too_large()
            return
        self.content.write(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if not self._refused:
            super().requestReceived(command, path, version)
        elif isinstance(self.channel, H2Stream):  # HTTP/2: answered now its stream ended
            self.method, self.uri, self.clientproto = command, path, version
            _reply(self, 413, _TOO_LARGE_BODY, b"%d" % len(_TOO_LARGE_BODY))
        # HTTP/1.1: the refusal was answered already and the connection closed

    def _refuse_too_large(self) -> None:
        self._refused = True
        self.content = BytesIO()
        channel = self.channel
        if isinstance(channel, H2Stream):
            # The connection carries other streams: this one's body is dropped as it comes
            # (handleContentChunk) and answered 413 when it ends (requestReceived).
            return
        if channel.transport is not None and not channel.transport.disconnecting:
            channel.transport.write(_TOO_LARGE_REPLY)
            channel.loseConnection()


class ContractChannel(HTTPChannel):
    """An HTTP/1.1 connection that is counted, closed cleanly on shutdown, and held to
    the contract's slow-client deadlines (docs/contract.md, "Slow clients").

    The deadlines ride on HTTPChannel's own timer (TimeoutMixin), which the channel
    already arms at `connectionMade` (with the site's timeout: the head deadline),
    cancels while a request is handled (`allContentReceived`) and arms again with the
    saved period when a response is done (`requestDone`). Two changes make it the
    contract's: data no longer resets it (`resetTimeout`), so it is a deadline and not an
    idle timer, and a request with a body gets the body deadline from the end of its head.
    """

    site: ContractSite

    def connectionMade(self) -> None:
        super().connectionMade()  # sets TCP_NODELAY, arms the timer with site.timeOut
        self.site.state.connection_opened()
        self.site.channels.add(self)

    def resetTimeout(self) -> None:
        """Not on every read: a client trickling a byte at a time must not keep its
        connection (HTTPChannel.dataReceived calls this for each chunk received)."""

    def allHeadersReceived(self) -> None:
        super().allHeadersReceived()
        if self.length != 0:  # a body follows (a length, or chunked: None)
            self.setTimeout(self.site.body_timeout_s)

    def allContentReceived(self) -> None:
        # HTTPChannel cancels the timer here and saves the period it had, to arm it with
        # when the response is done (requestDone, which may run within this call): that
        # must be the head deadline, also when the period was the body's.
        self.timeOut = self.site.timeOut
        super().allContentReceived()

    def connectionLost(self, reason: Any) -> None:
        super().connectionLost(reason)
        self.site.state.connection_closed()
        self.site.channels.discard(self)

    def requestDone(self, request: Request) -> None:
        super().requestDone(request)  # answers the pipelined requests already read, too
        # HTTPChannel stops reading when the transport's buffer fills (pauseProducing)
        # only if no request is being handled at that moment; with pipelined requests one
        # always is, so a client that pipelines and never reads the answers was read on
        # and answered into memory without end. Stop reading once those are answered:
        # resumeProducing reads again when the buffer drains, and the head deadline
        # closes a connection whose client never reads.
        if self._waitingForTransport and not self._handlingRequest and self.transport:
            self._networkProducer.pauseProducing()

    def handed_over(self) -> None:
        """The WebSocket protocol took the transport: it counts the close from now on."""
        self.site.channels.discard(self)

    def checkPersistence(self, request: Request, version: bytes) -> bool:
        if self.site.draining:
            request.responseHeaders.setRawHeaders(b"connection", [b"close"])
            return False
        return super().checkPersistence(request, version)

    def lineLengthExceeded(self, line: bytes) -> None:
        if not self.transport.disconnecting:
            self.transport.write(_HEADER_TOO_LONG_REPLY)
            self.loseConnection()

    def close_when_idle(self) -> None:
        """Close now unless a request is under way; that one closes after its response.

        A channel in line mode is between requests or inside a request's headers: no
        request has reached a handler (aiohttp closes those at once too). In raw mode a
        body is arriving or a handler has it (`/log` waiting for the sink).
        """
        if self.transport.disconnecting:
            return
        if not self.requests or self.line_mode:
            self.loseConnection()
            return
        self.persistent = False
        for request in self.requests:
            if not request.startedWriting:
                request.responseHeaders.setRawHeaders(b"connection", [b"close"])


class ContractH2Connection(H2Connection):
    """An HTTP/2 connection (h2, h2c): twisted.web's own, counted and closed on shutdown.

    Its timer is H2Connection's: the connection is closed once no frame arrived for the
    head timeout (an idle timer: streams share the connection, so no one stream's head or
    body can hold it to a deadline), also while its TLS handshake has not finished. The
    frames it reads are counted against the contract's HTTP/2 limits (FrameBudget): past
    one, GOAWAY ENHANCE_YOUR_CALM and a close.
    """

    site: ContractSite
    _counted_closed = False
    _calmed = False  # a limit was passed: the rest of what the client sends is not read
    # On its timeout H2Connection sends a GOAWAY and closes once it is written, aborting
    # after this long: a client that never finished its TLS handshake would otherwise
    # hold the connection 15 s (twisted.web's default) past the head timeout.
    abortTimeout = 1

    def connectionMade(self) -> None:
        self.budget = FrameBudget()
        super().connectionMade()  # sets TCP_NODELAY, arms the timer, sends SETTINGS
        self.site.state.connection_opened()
        self.site.channels.add(self)

    def dataReceived(self, data: bytes) -> None:
        if self._calmed:
            return
        passed = self.budget.received(data)
        if passed is not None:
            self._enhance_your_calm(passed)
            return
        super().dataReceived(data)

    def _enhance_your_calm(self, passed: str) -> None:
        """GOAWAY ENHANCE_YOUR_CALM (its debug data naming the limit `passed`) and close,
        aborting after abortTimeout: a client that reads nothing would hold the close."""
        self._calmed = True
        with contextlib.suppress(H2Error):
            self.conn.close_connection(
                error_code=contract.H2_ENHANCE_YOUR_CALM, additional_data=passed.encode()
            )
            self.transport.write(self.conn.data_to_send())
        self._abortingCall = self.callLater(self.abortTimeout, self.forceAbortClient)
        self.transport.loseConnection()

    def connectionLost(self, reason: Any, _cancelTimeouts: bool = True) -> None:
        super().connectionLost(reason, _cancelTimeouts)
        # H2Connection calls this itself on a GOAWAY, and the transport calls it again.
        if not self._counted_closed:
            self._counted_closed = True
            self.site.state.connection_closed()
            self.site.channels.discard(self)

    # A request and its RST_STREAM in one read (cleartext h2c, above all): h2 has closed
    # the stream by the time twisted.web renders the request, and a write to it raised
    # StreamClosedError (or StreamIDTooLowError) out of dataReceived, dropping every other
    # stream of the connection. The reset stream's answer has nowhere to go: it is
    # dropped, and the connection serves on (verify's h2-reset-stream).
    def _was_reset(self, stream_id: int) -> bool:
        stream = self.conn.streams.get(stream_id)
        return stream is None or stream.closed

    def writeHeaders(
        self, version: bytes, code: bytes, reason: bytes, headers: Any, streamID: int
    ) -> None:
        if not self._was_reset(streamID):
            super().writeHeaders(version, code, reason, headers, streamID)

    def writeDataToStream(self, streamID: int, data: bytes) -> None:
        if not self._was_reset(streamID):
            self.budget.sent(len(data))
            super().writeDataToStream(streamID, data)

    def endRequest(self, streamID: int) -> None:
        if not self._was_reset(streamID):  # a reset one: its StreamReset event cleans up
            self.budget.served()
            super().endRequest(streamID)

    def close_when_idle(self) -> None:
        """Close now unless a stream is under way (the drain asks again until none is)."""
        if not self.streams and self.transport is not None:
            self.transport.loseConnection()


class ContractSite(Site):
    """The Site: no access log, connection counting, and a drain for shutdown."""

    protocol = ContractChannel
    requestFactory = ContractRequest

    def __init__(
        self,
        resource: Resource,
        state: ServerState,
        head_timeout_s: float,
        body_timeout_s: float,
        protocol: str = contract.PROTOCOL_H1,
    ) -> None:
        # /log reads the raw body; parsing form uploads into request.args is wasted work.
        # `timeout` is each channel's first timer period: the head deadline.
        super().__init__(resource, parsePOSTFormSubmission=False, timeout=head_timeout_s)
        if protocol in (contract.PROTOCOL_H2, contract.PROTOCOL_H2C):
            self.protocol = ContractH2Connection  # HTTP/2 from each connection's start
        self.alpn = (
            [name.encode() for name in alpn_protocols(protocol)]
            if protocol in contract.TLS_PROTOCOLS
            else []
        )
        self.state = state
        self.body_timeout_s = body_timeout_s
        self.channels: set[ContractChannel | ContractH2Connection] = set()
        self.draining = False

    def acceptableProtocols(self) -> list[bytes]:
        """What TLS offers by ALPN (Twisted asks the factory): the case's protocol only.

        Site's own answer is h2 and http/1.1 whenever the h2 package is installed."""
        return self.alpn

    def log(self, request: Request) -> None:
        """No access log: formatting a line per request costs a large share of GET /."""

    def drain(self) -> None:
        """Close idle keep-alive connections; busy ones close after their response."""
        self.draining = True
        for channel in list(self.channels):
            channel.close_when_idle()


# -- HTTP routes ----------------------------------------------------------------------------
class Route(Resource):
    """A route with exact-path matching; a method it lacks gets 405.

    twisted.web answers 405 only for GET/HEAD/POST and 501 for any other method; the
    contract wants 405 for every method a route does not serve.
    """

    def __init__(self, state: ServerState) -> None:
        super().__init__()
        self.state = state

    def render(self, request: Request) -> bytes | int:
        try:
            return super().render(request)
        except UnsupportedMethod as refusal:
            if request.method == b"HEAD" and b"GET" in refusal.allowedMethods:
                raise  # twisted.web serves HEAD from render_GET
            request.setResponseCode(405)
            request.setHeader(b"allow", b", ".join(refusal.allowedMethods))
            request.setHeader(b"content-type", _TEXT_CONTENT_TYPE)
            return b"405: Method Not Allowed"


class TextRoute(Route):
    def render_GET(self, request: Request) -> bytes:
        self.state.requests += 1
        request.setHeader(b"content-type", _TEXT_CONTENT_TYPE)
        return contract.TEXT_BODY


class CounterRoute(Route):
    def render_GET(self, request: Request) -> bytes:
        self.state.requests += 1
        request.setHeader(b"content-type", _JSON_CONTENT_TYPE)
        return self.state.counter_payload()


class LogRoute(Route):
    """`ANY /log`: every method stores a record; the reply waits for the sink."""

    def __init__(self, state: ServerState, sink: TwistedSink) -> None:
        super().__init__(state)
        self.sink = sink

    def render(self, request: Request) -> bytes | int:
        self.state.requests += 1
        headers = {
            name.decode("latin-1"): b", ".join(values).decode("latin-1")
            for name, values in request.requestHeaders.getAllRawHeaders()
        }
        body = request.content.read().decode("utf-8", "replace")
        storing = self.sink.store_and_wait(
            self.state.make_record(
                request.method.decode("latin-1"), contract.ROUTE_LOG, headers, body
            )
        )
        if storing is None:  # stored already (empty sink)
            request.setHeader(b"content-type", _TEXT_CONTENT_TYPE)
            return contract.LOG_REPLY_BODY
        storing.addCallbacks(_stored, _not_stored, callbackArgs=(request,), errbackArgs=(request,))
        return NOT_DONE_YET


def _stored(_: None, request: Request) -> None:
    _reply(request, 200, contract.LOG_REPLY_BODY, _LOG_REPLY_LENGTH)


def _not_stored(failure: Failure, request: Request) -> None:
    if failure.check(SinkUnavailable):
        _reply(
            request,
            contract.UNAVAILABLE_STATUS,
            contract.SINK_UNAVAILABLE_BODY,
            _SINK_UNAVAILABLE_LENGTH,
        )
    elif not request._disconnected:  # a bug: logged and answered 500 by twisted.web
        request.processingFailed(failure)


def _reply(
    request: Request,
    code: int,
    body: bytes,
    length: bytes,
    content_type: bytes = _TEXT_CONTENT_TYPE,
) -> None:
    if request._disconnected:  # the client left (or shutdown closed it) meanwhile
        return
    request.setResponseCode(code)
    request.setHeader(b"content-type", content_type)
    request.setHeader(b"content-length", length)
    request.write(body)
    request.finish()


def _not_found(request: Request) -> bytes:
    request.setResponseCode(404)
    request.setHeader(b"content-type", _TEXT_CONTENT_TYPE)
    return contract.NOT_FOUND_BODY


def _one_segment(request: Request) -> str:
    """The name after the route's prefix: one path segment, percent-decoded by twisted.web.

    twisted.web neither normalises `..` nor decodes `%2f` before splitting, so
    `/files/../x` and `/files/..%2fx` arrive here as two segments or as `../x`: both are
    refused (404) by the caller.
    """
    postpath = request.postpath
    if len(postpath) != 1:
        return ""
    return postpath[0].decode("latin-1")


class FilesRoute(Route):
    """`GET /files/{name}`: streamed by twisted.web's NoRangeStaticProducer.

    The producer reads 64 KiB at a time on the reactor as the transport drains (the way
    twisted.web.static.File serves a file): the files are ≤ 64 KiB and page-cached, so
    that is one read of microseconds, and a bigger file would not block the reactor for
    long either. `static.File` itself is not used: it resolves names, symlinks and types
    by its own rules, where the contract's are `static.file_path`'s.
    """

    isLeaf = True

    def __init__(self, state: ServerState, files_dir: str | None) -> None:
        super().__init__(state)
        self.files_dir = files_dir

    def render_GET(self, request: Request) -> bytes | int:
        self.state.requests += 1
        found = static.file_path(self.files_dir, _one_segment(request))
        if found is None:
            return _not_found(request)
        try:
            file = open(found.path, "rb")  # noqa: SIM115 - the producer closes it
        except OSError:  # removed since file_path looked
            return _not_found(request)
        request.setHeader(b"content-type", found.content_type.encode())
        request.setHeader(b"content-length", b"%d" % os.fstat(file.fileno()).st_size)
        if request.method == b"HEAD":
            file.close()
            return b""
        NoRangeStaticProducer(request, file).start()
        return NOT_DONE_YET


class GridFSRoute(Route):
    """`GET /gridfs/{name}`: read by `_id` on the GridFS reader's thread pool."""

    isLeaf = True

    def __init__(self, state: ServerState, gridfs: GridFSReader) -> None:
        super().__init__(state)
        self.gridfs = gridfs

    def render_GET(self, request: Request) -> bytes | int:
        self.state.requests += 1
        name = _one_segment(request)
        if not static.valid_name(name):  # refused without touching the database
            return _not_found(request)
        self.gridfs.read(name).addCallbacks(
            _gridfs_file, _backend_failed, callbackArgs=(request,), errbackArgs=(request,)
        )
        return NOT_DONE_YET


def _gridfs_file(found: StoredFile | None, request: Request) -> None:
    if found is None:
        _reply(request, 404, contract.NOT_FOUND_BODY, _NOT_FOUND_LENGTH)
    else:
        length = b"%d" % len(found.data)
        _reply(request, 200, found.data, length, found.content_type.encode())


class MemcachedRoute(Route):
    """`GET /mc/{key}`: the value through the pool of memcached connections."""

    isLeaf = True

    def __init__(self, state: ServerState, pool: MemcachedPool) -> None:
        super().__init__(state)
        self.pool = pool

    def render_GET(self, request: Request) -> bytes | int:
        self.state.requests += 1
        key = b"/".join(request.postpath)  # memcached keys may hold a slash
        if not memcache.valid_key(key):
            return _not_found(request)
        self.pool.get(key).addCallbacks(
            _mc_value, _backend_failed, callbackArgs=(request,), errbackArgs=(request,)
        )
        return NOT_DONE_YET


def _mc_value(value: bytes | None, request: Request) -> None:
    if value is None:
        _reply(request, 404, contract.NOT_FOUND_BODY, _NOT_FOUND_LENGTH)
    else:
        _reply(request, 200, value, b"%d" % len(value), _MC_CONTENT_TYPE)


def _backend_failed(failure: Failure, request: Request) -> None:
    if failure.check(BackendUnavailable):
        _reply(
            request,
            contract.UNAVAILABLE_STATUS,
            contract.BACKEND_UNAVAILABLE_BODY,
            _BACKEND_UNAVAILABLE_LENGTH,
        )
    elif not request._disconnected:  # a bug: logged and answered 500 by twisted.web
        request.processingFailed(failure)


class WebSocketRoute(Route):
    """`GET /ws`: origin and subprotocol checked here, then autobahn takes the connection."""

    def __init__(self, state: ServerState, factory: WebSocketServerFactory) -> None:
        super().__init__(state)
        self.upgrade = WebSocketResource(factory)

    def render_GET(self, request: Request) -> bytes | int:
        self.state.requests += 1
        headers = request.requestHeaders
        refusal = websocket_handshake_status(
            _joined_header(headers, b"origin"), _joined_header(headers, b"sec-websocket-protocol")
        )
        if refusal is not None:
            request.setResponseCode(refusal)
            request.setHeader(b"content-type", _TEXT_CONTENT_TYPE)
            return b"%d" % refusal
        if isinstance(request.channel, H2Stream):  # no RFC 8441 in twisted.web
            request.setResponseCode(400)
            request.setHeader(b"content-type", _TEXT_CONTENT_TYPE)
            return b"WebSocket needs HTTP/1.1 here"
        # Checked above; autobahn would refuse "agent" again, as an Origin without a host.
        headers.removeHeader(b"origin")
        channel = request.channel
        result = self.upgrade.render(request)
        if channel.transport is None:
            channel.handed_over()
        return result


def _joined_header(headers: Any, name: bytes) -> str | None:
    values = headers.getRawHeaders(name)
    return None if values is None else b", ".join(values).decode("latin-1")


# -- WebSocket --------------------------------------------------------------------------------
@implementer(IPushProducer)
class _ReadWhileDraining:
    """Backpressure for one WebSocket: the transport stops reading from a peer while what
    we owe it (pongs to its pings, close frames) waits unsent past the transport's buffer
    size, and reads again once it drained. Without it a client that pings and never reads
    grew the server's memory without bound (85 to 178 MiB, never returned)."""

    def __init__(self, transport: Any) -> None:
        self._transport = transport

    def pauseProducing(self) -> None:
        self._transport.pauseProducing()  # stopReading

    def resumeProducing(self) -> None:
        self._transport.resumeProducing()  # startReading, unless disconnecting

    def stopProducing(self) -> None:
        return None


# What an open, idle autobahn connection keeps that it never reads again (tracemalloc, 2,000
# connections, autobahn 26.11): the handshake's request and response, kept "for the test
# suite", an empty send deque of 760 B used only by sync or chopped sends (none here), and
# a TrafficStats nothing here reads (one on the factory's protocol class counts for all).
_HANDSHAKE_LEFTOVERS = frozenset(
    {
        "http_headers",
        "http_headers_cnt",
        "http_request_data",
        "http_request_host",
        "http_request_params",
        "http_request_path",
        "http_request_uri",
        "http_response_data",
        "http_status_line",
        "_wskey",
        "websocket_origin",
        "websocket_protocols",
        "websocket_extensions",
        "send_queue",
        "trafficStats",
    }
)
# autobahn's per-connection flags and timers while a connection is open and idle: as class
# attributes (MessageFactory's protocol class) an instance keeps only those it changed.
_IDLE_DEFAULTS: dict[str, Any] = {
    **dict.fromkeys(
        (
            "_perMessageCompress",
            "autoPingPending",
            "autoPingPendingCall",
            "autoPingPendingSent",
            "autoPingTimeoutCall",
            "closeHandshakeTimeoutCall",
            "current_frame",
            "localCloseCode",
            "localCloseReason",
            "openHandshakeTimeoutCall",
            "remoteCloseCode",
            "remoteCloseReason",
            "trackedTimings",
            "wasNotCleanReason",
        )
    ),
    **dict.fromkeys(
        (
            "closedByMe",
            "droppedByMe",
            "failedByMe",
            "inside_message",
            "triggered",
            "wasClean",
            "wasCloseHandshakeTimeout",
            "wasMaxFramePayloadSizeExceeded",
            "wasMaxMessagePayloadSizeExceeded",
            "wasOpenHandshakeTimeout",
            "wasServerConnectionDropTimeout",
            "wasServingFlashSocketPolicyFile",
        ),
        False,
    ),
    "autoPingPendingSeq": 0,
    "connected": 1,
    "data": b"",
    "send_state": WebSocketServerProtocol.SEND_STATE_GROUND,
    "state": WebSocketServerProtocol.STATE_OPEN,
    "send_queue": (),  # len() 0 as autobahn asks; an append would fail loudly
}


class MessageProtocol(WebSocketServerProtocol):
    """One agent connection: each text message is a JSON object for the sink.

    Lean once open (`_shed`): autobahn copies its 29 options into every connection and
    keeps the handshake, an 86-entry dict of 3.3 KB and ~9 KB a connection in all; the
    options and idle defaults live on the factory's protocol class instead, so an idle
    connection's dict holds the ~15 attributes it owns."""

    factory: MessageFactory

    def connectionMade(self) -> None:
        super().connectionMade()
        transport = self.transport
        if transport is not None and hasattr(transport, "pauseProducing"):
            # The HTTP channel that handed the transport over is still its producer.
            transport.unregisterProducer()
            transport.registerProducer(_ReadWhileDraining(transport), True)

    def onConnect(self, request: Any) -> str:
        return contract.WS_SUBPROTOCOL  # offered: WebSocketRoute checked it

    def onOpen(self) -> None:
        self._shed()
        self.factory.open_protocols.add(self)

    def _shed(self) -> None:
        """Drop the handshake's leftovers and every attribute that holds its class's value
        (a new, compact dict: deleting keys would not shrink the old one)."""
        cls = type(self)
        self.__dict__ = {
            name: value
            for name, value in vars(self).items()
            if name not in _HANDSHAKE_LEFTOVERS
            and not (hasattr(cls, name) and getattr(cls, name) is value)
        }

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        if self.state != self.STATE_OPEN:
            return  # we are already closing it
        state = self.factory.server_state
        message = payload if isBinary else payload.decode("utf-8")  # autobahn checked UTF-8
        close_code = websocket_close_code(message)
        if close_code is None:
            state.messages += 1
            taken = self.factory.sink.store(
                state.make_record(
                    contract.WEBSOCKET_RECORD_METHOD, contract.ROUTE_WEBSOCKET, {}, message
                )
            )
            if not taken:  # the sink's queue is full: counted in sink_errors
                self.sendCloseFrame(code=contract.WS_CLOSE_TRY_AGAIN_LATER, isReply=False)
            return
        state.bad += 1
        # sendClose() accepts only 1000 and 3000-4999; the contract's codes are 100x.
        self.sendCloseFrame(code=close_code, isReply=False)

    def onCloseFrame(self, code: int | None, reasonRaw: bytes | None) -> bool | None:
        if code is not None and not peer_close_code_valid(code) and self.state == self.STATE_OPEN:
            # autobahn sends its 1002 and then takes this frame for the answer to it,
            # resetting the connection before the 1002 leaves: send it, then close.
            self.failedByMe = True  # counted in bad by onClose
            self.sendCloseFrame(
                code=contract.WS_CLOSE_PROTOCOL_ERROR, reasonUtf8=b"invalid close code",
                isReply=False,
            )  # fmt: skip
            self.dropConnection(abort=False)
            return True
        return super().onCloseFrame(code, reasonRaw)

    def dropConnection(self, abort: bool = False) -> None:
        # autobahn resets the connection once a closing handshake completes cleanly, which
        # discards a close frame of ours still unsent: a close frame refused with 1002 (a
        # one-byte payload) or 1007 (a reason that is not UTF-8) is also taken for the
        # answer to that refusal, in the same read. Closed gracefully, the frame leaves
        # first. An unclean end (a closing-handshake timeout) still resets.
        super().dropConnection(abort=abort and not self.wasClean)

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:
        if self.failedByMe:  # autobahn refused a frame: too big (1009), bad UTF-8, ...
            self.factory.server_state.bad += 1

    def connectionLost(self, reason: Any) -> None:
        super().connectionLost(reason)
        self.factory.open_protocols.discard(self)
        self.factory.server_state.connection_closed()  # it took over the HTTP channel

    def going_away(self) -> None:
        """Server shutdown: close with 1001."""
        self.sendCloseFrame(
            code=contract.WS_CLOSE_GOING_AWAY, reasonUtf8=b"server shutdown", isReply=False
        )


class MessageFactory(WebSocketServerFactory):
    protocol = MessageProtocol

    def __init__(self, state: ServerState, sink: TwistedSink, reactor: Any) -> None:
        super().__init__(reactor=reactor)
        self.server_state = state
        self.sink = sink
        self.open_protocols: set[MessageProtocol] = set()
        self.setProtocolOptions(
            maxFramePayloadSize=contract.WS_MAX_MESSAGE_BYTES,
            maxMessagePayloadSize=contract.WS_MAX_MESSAGE_BYTES,
            failByDrop=False,  # send the close code (1009 ...) instead of dropping TCP
            webStatus=False,  # a plain GET /ws is refused, not answered with a status page
            openHandshakeTimeout=0,  # the handshake arrives whole from twisted.web
            autoPingInterval=0,
            perMessageCompressionAccept=_refuse_compression,
        )
        # This factory's protocol class carries the options autobahn copies into each
        # connection, the idle defaults and one TrafficStats (counted, never read here).
        # (a function among them, perMessageCompressionAccept, stays a plain function)
        shared: dict[str, Any] = {}
        for name in MessageProtocol.CONFIG_ATTRS:
            value = getattr(self, name)
            shared[name] = staticmethod(value) if isinstance(value, FunctionType) else value
        self.protocol = type(
            "MessageProtocol",
            (MessageProtocol,),
            {**shared, **_IDLE_DEFAULTS, "trafficStats": TrafficStats()},
        )


def _refuse_compression(offers: list[Any]) -> None:
    return None


# -- process --------------------------------------------------------------------------------
def make_site(
    options: ServerOptions,
    state: ServerState,
    sink: TwistedSink,
    gridfs: GridFSReader,
    pool: MemcachedPool,
    reactor: Any,
) -> tuple[ContractSite, MessageFactory]:
    """The contract's routes; twisted.web answers unknown paths 404."""
    websockets = MessageFactory(state, sink, reactor)
    root = Resource()
    root.putChild(b"", TextRoute(state))
    root.putChild(_segment(contract.ROUTE_COUNTER), CounterRoute(state))
    root.putChild(_segment(contract.ROUTE_LOG), LogRoute(state, sink))
    root.putChild(_segment(contract.ROUTE_FILES_PREFIX), FilesRoute(state, options.files_dir))
    root.putChild(_segment(contract.ROUTE_GRIDFS_PREFIX), GridFSRoute(state, gridfs))
    root.putChild(_segment(contract.ROUTE_MEMCACHED_PREFIX), MemcachedRoute(state, pool))
    root.putChild(_segment(contract.ROUTE_WEBSOCKET), WebSocketRoute(state, websockets))
    add_workload_routes(root, state, reactor)
    site = ContractSite(
        root, state, options.head_timeout_s, options.body_timeout_s, options.protocol
    )
    return site, websockets


def _segment(route: str) -> bytes:
    """A route's first path segment: `/files/` → b"files"."""
    return route.strip("/").encode()


def _log_warnings_to_stderr() -> None:
    # Without an observer Twisted buffers every event and shows none; stdout is telemetry.
    observer = FilteringLogObserver(
        textFileLogObserver(sys.stderr),
        [LogLevelFilterPredicate(defaultLogLevel=LogLevel.warn)],
    )
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)


def serve(worker: Worker) -> None:
    """Serve `worker` (see servers.frameworks) on Twisted's epoll reactor."""
    options, listener, state = worker.options, worker.listener, worker.state
    mc_listener = worker.mc_listener
    from servers.runtimes.twisted.reactor import install_bounded_epoll_reactor

    install_bounded_epoll_reactor()  # the epoll reactor, a close storm taken in batches
    from twisted.internet import reactor

    _log_warnings_to_stderr()
    sink = open_twisted_sink(options, state, reactor)
    gridfs = GridFSReader(mongo_url(options), options.mongo_db, state, reactor)
    pool = MemcachedPool(memcache.memcached_address(options.memcached), state, reactor)
    site, websockets = make_site(options, state, sink, gridfs, pool, reactor)
    # h1-tls, h2: TLS around the site, as listenSSL serves one; h1, h2c: the site itself.
    http_factory = tls_factory(options, site) if options.tls else site
    ports = [_adopt(reactor, listener, http_factory)]
    socket_service: MemcachedSocketServiceFactory | None = None
    if mc_listener is not None:
        socket_service = MemcachedSocketServiceFactory(state, pool)
        ports.append(_adopt(reactor, mc_listener, socket_service))

    timers = TelemetryTimers(state, reactor.callLater)

    def drain() -> None:
        site.drain()
        if socket_service is not None:
            socket_service.drain()

    def close_backends(_: object) -> Deferred:
        pool.close()
        return gatherResults([sink.close(), gridfs.close()], consumeErrors=True)

    def shut_down() -> Deferred:
        """Runs on SIGTERM/SIGINT (reactor.stop), before the reactor drops connections."""
        stopped = gatherResults([maybeDeferred(port.stopListening) for port in ports])
        for protocol in list(websockets.open_protocols):
            protocol.going_away()
        drain()
        drained: Deferred = Deferred()
        deadline_s = reactor.seconds() + contract.SHUTDOWN_GRACE_S / 2

        def poll() -> None:
            if state.open <= 0 or reactor.seconds() >= deadline_s:
                drained.callback(None)
            else:
                drain()
                reactor.callLater(_DRAIN_POLL_S, poll)

        poll()
        # Whatever is still open after the deadline, the reactor closes next; the sink
        # writes what it was given, closes its file or client and stops its pool, and the
        # GridFS reader closes its client, within CLOSE_TIMEOUT_S (2 s): 2.5 s + 2 s stays
        # inside the contract's 5 s.
        done = gatherResults([stopped, drained])
        return done.addBoth(close_backends)

    def stop() -> None:
        with contextlib.suppress(ReactorNotRunning):  # a second signal while shutting down
            reactor.stop()

    def on_signal(signum: int, frame: object) -> None:
        reactor.callFromThread(stop)  # wakes the reactor from epoll_wait

    # Our own handlers: the reactor leaves SIGINT alone when it was ignored at start
    # (a background job of a shell), and the contract says SIGINT stops the server too.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    reactor.callWhenRunning(timers.start)
    reactor.addSystemEventTrigger("before", "shutdown", shut_down)
    reactor.run(installSignalHandlers=False)
    state.emit_telemetry()


def _adopt(reactor: Any, listener: socket.socket, factory: Any) -> Any:
    """Accept on a socket `__main__` opened (TCP_NODELAY set there, inherited on accept)."""
    listener.setblocking(False)  # Twisted accepts in a loop until EAGAIN
    port = reactor.adoptStreamPort(listener.fileno(), listener.family, factory)
    listener.close()  # the reactor holds its own duplicate of the descriptor
    return port
