"""The wire contract as a plain WSGI app on gunicorn's gevent workers: `/`, `/counter`,
`/log` with the three sinks, and `/ws`.

gunicorn parses HTTP (its parser refuses ambiguous framing and oversized headers itself);
gevent's monkey-patching (done by the worker before the app is imported) makes the sinks'
blocking calls block one greenlet only. What must be identical to our servers is reused:
the counters and records (servers.core.state), the body limit (servers.core.body_limit),
the green sinks (servers.runtimes.green.sinks: the file sink's writes on a real thread,
pymongo on green sockets).

WSGI has no WebSocket, but gunicorn hands the app its connection (`gunicorn.socket`), as
Flask-Sock and simple-websocket use it: `/ws` answers the handshake itself on that socket,
runs our green servers' own session on it (servers.runtimes.green.app.WebSocketSession:
wsproto, the same rules and records), then raises StopIteration, gunicorn's way to close a
connection without writing a response.

`CountingGeventWorker` is gunicorn's stock gevent worker with three additions, since a WSGI
app sees requests, never connections: it counts each connection for `/counter` around
gunicorn's own per-connection handler, sends each open WebSocket a 1001 close when told to
stop (gunicorn would cut them after its graceful timeout), and closes the sink when the
worker ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import gevent
from gunicorn.workers.ggevent import GeventWorker

from servers import contract
from servers.contenders.environment import options_from_environment
from servers.contenders.state import process_state
from servers.core.body_limit import TOO_LARGE_STATUS, declared_too_large
from servers.core.error_replies import error_body, status_line
from servers.core.sinks import SinkUnavailable
from servers.runtimes.green.app import WebSocketSession, websocket_handshake
from servers.runtimes.green.gevent_runtime import gevent_runtime
from servers.runtimes.green.sinks import GreenSink, open_green_sink
from servers.runtimes.green.workloads import workload_routes

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
TEXT = contract.TEXT_CONTENT_TYPE
_sink: GreenSink | None = None  # opened in the worker process, on first use
_websockets: set[WebSocketSession] = set()  # this worker's open /ws sessions
_EMPTY: tuple[bytes, ...] = ()


def worker_sink() -> GreenSink:
    """This worker's sink, opened on first use (after gunicorn forked the worker)."""
    global _sink
    if _sink is None:
        runtime, _ = gevent_runtime()  # its pool lives as long as the worker
        _sink = open_green_sink(options_from_environment(), process_state(), runtime)
    return _sink


def _answer(
    start_response: StartResponse,
    code: int,
    body: bytes,
    content_type: str = TEXT,
    extra: Iterable[tuple[str, str]] = (),
) -> list[bytes]:
    headers = [("Content-Type", content_type), ("Content-Length", str(len(body))), *extra]
    start_response(status_line(code), headers)
    return [body]


# The hot path answers from precomputed values, as our green servers do.
_OK = "200 OK"
_TEXT_HEADERS = [("Content-Type", TEXT), ("Content-Length", str(len(contract.TEXT_BODY)))]
_TEXT_RESULT = [contract.TEXT_BODY]
_READS = ("GET", "HEAD")
_NOT_FOUND_BODY = error_body(404)
_NOT_ALLOWED_BODY = error_body(405)


def _error(start_response: StartResponse, code: int) -> list[bytes]:
    return _answer(start_response, code, error_body(code))


def _too_large(start_response: StartResponse) -> list[bytes]:
    """413, then close: the rest of the body is not read."""
    return _refuse({}, start_response, TOO_LARGE_STATUS)


def _refuse(environ: Environ, start_response: StartResponse, code: int) -> list[bytes]:
    """`code`, then close."""
    return _answer(start_response, code, error_body(code), extra=[("Connection", "close")])


class _GunicornDeadlines:
    """gunicorn keeps its own socket timeouts: no body deadline of ours to arm."""

    def await_body(self) -> None:
        """Nothing to arm."""

    def server_busy(self) -> None:
        """Nothing to disarm."""


class _Uncounted:
    """The workload routes count into this: `application` counts every request itself."""

    requests = 0


# The boards' workloads: our green servers' own handlers (gunicorn's worker is gevent's,
# so their green sleep parks one greenlet), over gunicorn's headers (it adds Server, Date).
_WORKLOADS, _WORKLOAD_PREFIXES = workload_routes(
    _Uncounted(),
    lambda environ: _GunicornDeadlines(),
    lambda content_type, body: [("Content-Type", content_type), ("Content-Length", str(len(body)))],
    _error,
    _refuse,
)


def _workload(path: str) -> dict[str, Callable[..., Iterable[bytes]]] | None:
    found = _WORKLOADS.get(path)
    if found is None and path.startswith(contract.ROUTE_DELAY_PREFIX):
        found = _WORKLOAD_PREFIXES[contract.ROUTE_DELAY_PREFIX]
    return found


def application(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
    """The contract's routes: unknown paths 404, wrong methods 405 with Allow."""
    state = process_state()
    state.requests += 1
    path, method = environ["PATH_INFO"], environ["REQUEST_METHOD"]
    if path == contract.ROUTE_TEXT and method == "GET":
        start_response(_OK, _TEXT_HEADERS)
        return _TEXT_RESULT
    workload = _workload(path)
    if workload is not None:
        handler = workload.get(method)
        if handler is None:
            allow = [("Allow", ",".join(workload))]
            return _answer(start_response, 405, _NOT_ALLOWED_BODY, extra=allow)
        return handler(environ, start_response)
    if path == contract.ROUTE_LOG:
        return _log(environ, start_response, method)
    if path == contract.ROUTE_WEBSOCKET:
        if method != "GET":
            return _answer(start_response, 405, _NOT_ALLOWED_BODY, extra=[("Allow", "GET")])
        return _websocket(environ, start_response)
    if path == contract.ROUTE_TEXT:
        body, content_type = contract.TEXT_BODY, TEXT
    elif path == contract.ROUTE_COUNTER:
        body, content_type = state.counter_payload(), contract.JSON_CONTENT_TYPE
    else:
        return _answer(start_response, 404, _NOT_FOUND_BODY)
    if method not in _READS:
        allow = [("Allow", "GET,HEAD")]
        return _answer(start_response, 405, _NOT_ALLOWED_BODY, extra=allow)
    answered = _answer(start_response, 200, body, content_type)
    return _EMPTY if method == "HEAD" else answered


def _log(environ: Environ, start_response: StartResponse, method: str) -> Iterable[bytes]:
    declared = environ.get("CONTENT_LENGTH")
    if declared_too_large(int(declared) if declared else None):
        return _too_large(start_response)  # unread
    body = environ["wsgi.input"].read(contract.LOG_MAX_BODY_BYTES + 1)
    if len(body) > contract.LOG_MAX_BODY_BYTES:  # a chunked body past the limit
        return _too_large(start_response)
    headers = {
        key[5:].replace("_", "-").title(): value
        for key, value in environ.items()
        if key.startswith("HTTP_")
    }
    if environ.get("CONTENT_TYPE"):
        headers["Content-Type"] = environ["CONTENT_TYPE"]
    if declared:
        headers["Content-Length"] = declared
    record = process_state().request_record(method, contract.ROUTE_LOG, headers, body)
    try:
        worker_sink().store_and_wait(record)  # blocks this greenlet only
    except SinkUnavailable:
        return _answer(start_response, contract.UNAVAILABLE_STATUS, contract.SINK_UNAVAILABLE_BODY)
    answered = _answer(start_response, 200, contract.LOG_REPLY_BODY)
    return _EMPTY if method == "HEAD" else answered


def _websocket(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
    """`/ws`: the handshake's refusals as the contract says, else the session on the
    connection gunicorn hands over; gunicorn then closes it and writes nothing."""
    accept = websocket_handshake(environ)
    if isinstance(accept, tuple):  # refused
        return _answer(start_response, *accept)
    sock = environ["gunicorn.socket"]
    sock.sendall(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: %s\r\nSec-WebSocket-Protocol: %s\r\n\r\n"
        % (accept.encode("ascii"), contract.WS_SUBPROTOCOL.encode("ascii"))
    )
    # A client sends its first frame after the 101, so gunicorn's parser holds none of it.
    # gunicorn's worker wakes sessions as its loop does: no turn shared (share_turn a no-op)
    session = WebSocketSession(sock, process_state(), worker_sink(), share_turn=lambda: None)
    _websockets.add(session)
    try:
        session.run()
    finally:
        _websockets.discard(session)
    raise StopIteration("the WebSocket session ended")  # gunicorn: close, write nothing


class CountingGeventWorker(GeventWorker):
    """gunicorn's gevent worker, counting connections and closing the sink at its end."""

    def handle(self, listener: Any, client: Any, addr: Any) -> None:
        state = process_state()
        state.connection_opened()
        try:
            super().handle(listener, client, addr)
        finally:
            state.connection_closed()

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)  # stop accepting; gunicorn waits its graceful timeout
        for session in list(_websockets):  # a greenlet each: not from the signal handler
            gevent.spawn(session.go_away)

    def run(self) -> None:
        try:
            super().run()
        finally:
            if _sink is not None:
                _sink.close()  # the file's last batch written, inserts drained
