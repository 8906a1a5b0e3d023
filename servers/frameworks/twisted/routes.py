"""The contract's routes as twisted.web Resources: exact paths, 405 for a method a route
lacks, `/log` answered once the sink stored its record, the backends from Deferreds, and
`/ws` checked here before autobahn takes the connection."""

from __future__ import annotations

import os
from typing import Any

from autobahn.twisted.resource import WebSocketResource
from autobahn.twisted.websocket import WebSocketServerFactory
from twisted.python.failure import Failure
from twisted.web._http2 import H2Stream  # twisted.web's HTTP/2 (h2 package)
from twisted.web.error import UnsupportedMethod
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request
from twisted.web.static import NoRangeStaticProducer

from servers import contract
from servers.core import memcache, static
from servers.core.backends import BackendUnavailable, StoredFile
from servers.core.error_replies import error_body
from servers.core.sinks import SinkUnavailable
from servers.core.state import ServerState
from servers.core.websocket import websocket_handshake_status
from servers.frameworks.twisted.replies import (
    BACKEND_UNAVAILABLE_LENGTH,
    JSON_CONTENT_TYPE,
    LOG_REPLY_LENGTH,
    MC_CONTENT_TYPE,
    NOT_FOUND_LENGTH,
    SINK_UNAVAILABLE_LENGTH,
    TEXT_CONTENT_TYPE,
    not_found,
    reply,
)
from servers.runtimes.twisted.backends import GridFSReader, MemcachedPool
from servers.runtimes.twisted.sinks import TwistedSink

_NOT_ALLOWED_BODY = error_body(405)  # b"405: Method Not Allowed"


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
            request.setHeader(b"content-type", TEXT_CONTENT_TYPE)
            return _NOT_ALLOWED_BODY


class TextRoute(Route):
    def render_GET(self, request: Request) -> bytes:
        self.state.requests += 1
        request.setHeader(b"content-type", TEXT_CONTENT_TYPE)
        return contract.TEXT_BODY


class CounterRoute(Route):
    def render_GET(self, request: Request) -> bytes:
        self.state.requests += 1
        request.setHeader(b"content-type", JSON_CONTENT_TYPE)
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
        method = request.method.decode("latin-1")
        storing = self.sink.store_and_wait(
            self.state.request_record(method, contract.ROUTE_LOG, headers, request.content.read())
        )
        if storing is None:  # stored already (empty sink)
            request.setHeader(b"content-type", TEXT_CONTENT_TYPE)
            return contract.LOG_REPLY_BODY
        storing.addCallbacks(_stored, _not_stored, callbackArgs=(request,), errbackArgs=(request,))
        return NOT_DONE_YET


def _stored(_: None, request: Request) -> None:
    reply(request, 200, contract.LOG_REPLY_BODY, LOG_REPLY_LENGTH)


def _not_stored(failure: Failure, request: Request) -> None:
    if failure.check(SinkUnavailable):
        reply(
            request,
            contract.UNAVAILABLE_STATUS,
            contract.SINK_UNAVAILABLE_BODY,
            SINK_UNAVAILABLE_LENGTH,
        )
    elif not request._disconnected:  # a bug: logged and answered 500 by twisted.web
        request.processingFailed(failure)


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
            return not_found(request)
        try:
            file = open(found.path, "rb")  # noqa: SIM115 - the producer closes it
        except OSError:  # removed since file_path looked
            return not_found(request)
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
            return not_found(request)
        self.gridfs.read(name).addCallbacks(
            _gridfs_file, _backend_failed, callbackArgs=(request,), errbackArgs=(request,)
        )
        return NOT_DONE_YET


def _gridfs_file(found: StoredFile | None, request: Request) -> None:
    if found is None:
        reply(request, 404, contract.NOT_FOUND_BODY, NOT_FOUND_LENGTH)
    else:
        length = b"%d" % len(found.data)
        reply(request, 200, found.data, length, found.content_type.encode())


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
            return not_found(request)
        self.pool.get(key).addCallbacks(
            _mc_value, _backend_failed, callbackArgs=(request,), errbackArgs=(request,)
        )
        return NOT_DONE_YET


def _mc_value(value: bytes | None, request: Request) -> None:
    if value is None:
        reply(request, 404, contract.NOT_FOUND_BODY, NOT_FOUND_LENGTH)
    else:
        reply(request, 200, value, b"%d" % len(value), MC_CONTENT_TYPE)


def _backend_failed(failure: Failure, request: Request) -> None:
    if failure.check(BackendUnavailable):
        reply(
            request,
            contract.UNAVAILABLE_STATUS,
            contract.BACKEND_UNAVAILABLE_BODY,
            BACKEND_UNAVAILABLE_LENGTH,
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
            request.setHeader(b"content-type", TEXT_CONTENT_TYPE)
            return b"%d" % refusal
        if isinstance(request.channel, H2Stream):  # no RFC 8441 in twisted.web
            request.setResponseCode(400)
            request.setHeader(b"content-type", TEXT_CONTENT_TYPE)
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
