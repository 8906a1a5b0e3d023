"""The contract's HTTP routes in the green WSGI application (gevent, eventlet): `/` and
`/counter`, `/log` through the sink, and the backend routes (`/files`, `/gridfs`, `/mc`,
reading through servers.runtimes.green.backends). Each factory returns handlers in the
route tables' shape (path -> method -> handler) that GreenApp dispatches on.

A handler is a closure over what it needs, bound once when the application is made: the
text route, the one `harness bench` measures, answers from precomputed values (one header
list a second, one body tuple) and looks nothing up per request.
"""

from __future__ import annotations

from collections.abc import Iterable

from servers import contract
from servers.core import memcache, static
from servers.core.backends import BackendUnavailable
from servers.core.body_limit import TOO_LARGE_STATUS, BodyCounter, declared_too_large
from servers.core.error_replies import status_line
from servers.core.sinks import SinkUnavailable
from servers.core.state import ServerState
from servers.runtimes.green.backends import GreenBackends, read_file
from servers.runtimes.green.deadlines import ClientDeadlines, ClientTimeout
from servers.runtimes.green.interfaces import (
    Environ,
    GreenConnection,
    Handler,
    Routes,
    Sink,
    StartResponse,
)
from servers.runtimes.green.replies import EMPTY, DatedHeaders, Replies

# A body no route reads is read and dropped in pieces of this size.
DRAIN_READ_BYTES = 64 * 1024
_OK = status_line(200)


def text_routes(state: ServerState, replies: Replies) -> Routes:
    """`/` (GET, HEAD) and `/counter` (GET, HEAD)."""
    text_headers = DatedHeaders(replies.headers(contract.TEXT_CONTENT_TYPE, contract.TEXT_BODY)).now
    text_result = (contract.TEXT_BODY,)
    headers = replies.headers
    ok = _OK

    def text(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        state.requests += 1
        start_response(ok, text_headers())
        return text_result

    def text_head(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        state.requests += 1
        start_response(ok, text_headers())
        return EMPTY

    def counter(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        state.requests += 1
        body = state.counter_payload()
        start_response(ok, headers(contract.JSON_CONTENT_TYPE, body))
        return EMPTY if environ["REQUEST_METHOD"] == "HEAD" else (body,)

    return {
        contract.ROUTE_TEXT: {"GET": text, "HEAD": text_head},
        contract.ROUTE_COUNTER: {"GET": counter, "HEAD": counter},
    }


def log_route(
    state: ServerState, sink: Sink, connection: GreenConnection, replies: Replies
) -> Handler:
    """`/log` (any method): the body read within its deadline, stored as a record, and the
    reply sent once the sink has it (503 when it cannot be stored)."""
    log_headers = replies.headers(contract.TEXT_CONTENT_TYPE, contract.LOG_REPLY_BODY)
    log_result = (contract.LOG_REPLY_BODY,)
    plain = replies.plain
    refuse = replies.refuse

    def log(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        state.requests += 1
        declared = environ.get("CONTENT_LENGTH")
        length = int(declared) if declared else None  # digits: framing_error checked
        if declared_too_large(length):
            return refuse(environ, start_response, TOO_LARGE_STATUS)  # at once, nothing read
        counter = BodyCounter()
        deadlines = connection.deadlines(environ)
        deadlines.await_body()
        try:  # one byte past the limit is enough to know a chunked body is over it
            body = environ["wsgi.input"].read(counter.limit_bytes + 1)
        except ClientTimeout:  # before OSError: it is one
            return refuse(environ, start_response, 408)
        except (OSError, ValueError):  # the body ended early, or bad chunked framing
            return refuse(environ, start_response, 400)
        finally:
            deadlines.server_busy()
        if not counter.take(len(body)):  # a chunked body
            return refuse(environ, start_response, TOO_LARGE_STATUS)
        if length is not None and len(body) < length:
            # eventlet returns what came before the client's EOF: a truncated body
            # is no record (gevent raises instead, caught above).
            return refuse(environ, start_response, 400)
        method = environ["REQUEST_METHOD"]
        record = state.request_record(
            method, environ["PATH_INFO"], connection.request_headers(environ), body
        )
        try:
            sink.store_and_wait(record)  # blocks this green thread only
        except SinkUnavailable:
            return plain(
                start_response, contract.UNAVAILABLE_STATUS, contract.SINK_UNAVAILABLE_BODY
            )
        start_response(_OK, log_headers)
        return EMPTY if method == "HEAD" else log_result

    return log


def backend_routes(state: ServerState, backends: GreenBackends, replies: Replies) -> Routes:
    """The prefix routes `/files/{name}`, `/gridfs/{name}` and `/mc/{key}` (GET, HEAD): the
    name or key is the rest of the (percent-decoded) path."""
    files_dir = backends.files_dir
    gridfs = backends.gridfs
    memcached = backends.memcached
    plain = replies.plain
    headers = replies.headers
    not_found = contract.NOT_FOUND_BODY
    unavailable = contract.BACKEND_UNAVAILABLE_BODY
    files_start = len(contract.ROUTE_FILES_PREFIX)
    gridfs_start = len(contract.ROUTE_GRIDFS_PREFIX)
    mc_start = len(contract.ROUTE_MEMCACHED_PREFIX)

    def found(
        environ: Environ, start_response: StartResponse, content_type: str, body: bytes
    ) -> Iterable[bytes]:
        start_response(_OK, headers(content_type, body))
        return EMPTY if environ["REQUEST_METHOD"] == "HEAD" else (body,)

    def files(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        state.requests += 1
        static_file = static.file_path(files_dir, environ["PATH_INFO"][files_start:])
        if static_file is None:
            return plain(start_response, 404, not_found)
        try:
            body = read_file(static_file)  # small and page-cached: a plain read
        except OSError:  # gone since the stat
            return plain(start_response, 404, not_found)
        return found(environ, start_response, static_file.content_type, body)

    def gridfs_file(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        state.requests += 1
        name = environ["PATH_INFO"][gridfs_start:]
        if not static.valid_name(name):
            return plain(start_response, 404, not_found)  # the database is not asked
        try:
            stored = gridfs.read(name)  # blocks this green thread only
        except BackendUnavailable:
            return plain(start_response, contract.UNAVAILABLE_STATUS, unavailable)
        if stored is None:
            return plain(start_response, 404, not_found)
        return found(environ, start_response, stored.content_type, stored.data)

    def mc(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        state.requests += 1
        try:  # PEP 3333: PATH_INFO holds the request's bytes decoded as latin-1
            key = environ["PATH_INFO"][mc_start:].encode("latin-1")
        except UnicodeEncodeError:
            key = b""  # not bytes a client sent: no valid key
        if not memcache.valid_key(key):
            return plain(start_response, 404, not_found)
        try:
            value = memcached.get(key)  # blocks this green thread only
        except BackendUnavailable:
            return plain(start_response, contract.UNAVAILABLE_STATUS, unavailable)
        if value is None:
            return plain(start_response, 404, not_found)
        return found(environ, start_response, contract.MC_CONTENT_TYPE, value)

    return {
        contract.ROUTE_FILES_PREFIX: {"GET": files, "HEAD": files},
        contract.ROUTE_GRIDFS_PREFIX: {"GET": gridfs_file, "HEAD": gridfs_file},
        contract.ROUTE_MEMCACHED_PREFIX: {"GET": mc, "HEAD": mc},
    }


def drain_body(environ: Environ, deadlines: ClientDeadlines) -> int | None:
    """Read and drop the body of a request whose route does not read it, within the body
    deadline: None, or the status to refuse the request with. Left to the framework, it
    would be discarded after the response with no deadline at all."""
    request_body = environ["wsgi.input"]
    deadlines.await_body()
    try:
        while request_body.read(DRAIN_READ_BYTES):
            pass
    except ClientTimeout:  # before OSError: it is one
        return 408
    except (OSError, ValueError):  # the body ended early, or bad chunked framing
        return 400
    finally:
        deadlines.server_busy()
    return None
