"""The wire contract on gevent: `gevent.pywsgi.WSGIServer` over monkey-patched sockets.

TLS (h1-tls) is gevent's own: the server is given `ssl_context` (servers.core.tls, made
after monkey-patching, so a gevent context) and wraps each accepted socket in its
connection's greenlet; the handshake is left to the first read, which runs under the head
deadline, so a client that never finishes it is closed like one that never sends a head.

The memcached socket service (`--mc-socket-port`) is a `gevent.server.StreamServer` running
servers.runtimes.green.backends' shared protocol loop on each connection.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

# ruff: noqa: E402  (everything below must come after monkey-patching)
import contextlib
import signal
import socket
import ssl
from collections.abc import Callable, Sequence

import gevent
import gevent.socket
from gevent.event import Event
from gevent.pool import Pool
from gevent.pywsgi import WSGIHandler, WSGIServer
from gevent.server import StreamServer

from servers.core.shutdown import CONNECTIONS_GRACE_S
from servers.core.state import ServerState
from servers.core.tls import server_context
from servers.frameworks import Worker
from servers.runtimes.green.app import (
    Environ,
    GreenApp,
    report_forever,
    server_software,
    tick_forever,
)
from servers.runtimes.green.backends import GreenBackends, MemcachedSocketService
from servers.runtimes.green.deadlines import ClientDeadlines, ClientTimeout, deadlines_factory
from servers.runtimes.green.gevent_runtime import TurnShare, gevent_runtime
from servers.runtimes.green.sinks import open_green_sink

SERVER_SOFTWARE = server_software("gevent", gevent.__version__)
# Where a request's environ points back at its pywsgi handler (headers, socket).
_HANDLER_KEY = "servers.gevent.handler"


class Handler(WSGIHandler):
    """pywsgi's per-connection handler, made to say when it is idle between requests and
    to keep the head deadline (servers.runtimes.green.deadlines).

    Shutdown closes idle keep-alive connections at once and lets busy ones finish their
    request; a busy one then finds `server.stopping` and closes instead of reading on.

    The overrides run on every request, so they call WSGIHandler's method by name rather
    than through `super()`: on CPython 3.11 a `super()` call costs 0.09 µs more, and four
    of them ran per request (0.3 µs per keep-alive `GET /`, timeit and in-process).
    """

    server: Server
    deadlines: ClientDeadlines  # set by Server.handle before the first request
    idle = False
    # The header fields as parsed, before pywsgi drops Content-Length from a chunked
    # request: the green runtime judges the framing on these (servers.core.framing).
    raw_headers: Sequence[tuple[str, str]] = ()

    def MessageClass(self, *args):
        headers = WSGIHandler.MessageClass(self, *args)
        # http.client's parsed fields; pywsgi's `del headers["content-length"]` replaces
        # this list rather than editing it, so it stays as received. No copy: it is free.
        self.raw_headers = headers._headers
        return headers

    def read_requestline(self) -> str:
        if self.server.stopping:
            return ""  # no further request on this connection: pywsgi closes it
        # From the previous response's end (or the connection's opening): a ClientTimeout
        # here is a socket error to pywsgi, which closes the connection quietly.
        self.deadlines.await_head()
        self.idle = True
        try:
            return WSGIHandler.read_requestline(self)
        finally:
            self.idle = False

    def read_request(self, raw_requestline: str) -> bool:
        try:
            WSGIHandler.read_request(self, raw_requestline)  # reads the header lines
        finally:
            self.deadlines.server_busy()
        # http.client's header parser takes a line without a colon for the start of the
        # body and records a defect; pywsgi would serve the request anyway.
        if self.headers.defects:
            raise ValueError(f"malformed header section: {self.headers.defects}")
        return True

    def log_request(self) -> None:
        """No access log line: the server is made with `log=None`, and pywsgi would still
        format one per request (a datetime, a %-format) only to write it to a null log.
        Not formatting it bought 3.5 µs per keep-alive `GET /` (in-process; the minimal
        app, also `log=None`, still pays it), and 55 ms of one loop turn when 3,000
        WebSocket connections closed at once (cProfile, busy machine)."""

    def _handle_client_error(self, ex: BaseException) -> tuple[str, bytes]:
        # pywsgi's hook for a request it could not read: a missed head deadline while the
        # headers came is closed without a word, not answered 400 with a traceback.
        if isinstance(ex, ClientTimeout):
            return "408", b""
        return super()._handle_client_error(ex)

    def get_environ(self) -> Environ:
        environ = WSGIHandler.get_environ(self)
        environ[_HANDLER_KEY] = self
        # pywsgi hands an upgrade request (Upgrade: websocket on any path) the raw socket
        # reader as its input, which would read past the body into the next request; the
        # application reads bodies only as framed. /ws takes the raw reader over itself.
        environ["wsgi.input"] = self.wsgi_input
        return environ


class GeventConnection:
    """`servers.green.GreenConnection` on pywsgi: everything is on the handler."""

    def __init__(self) -> None:
        self.share_turn = TurnShare()

    def request_headers(self, environ: Environ) -> dict[str, str]:
        return dict(environ[_HANDLER_KEY].headers.items())

    def deadlines(self, environ: Environ) -> ClientDeadlines:
        return environ[_HANDLER_KEY].deadlines

    def raw_headers(self, environ: Environ) -> Sequence[tuple[str, str]]:
        return environ[_HANDLER_KEY].raw_headers

    def close_after_response(self, environ: Environ) -> list[tuple[str, str]]:
        handler: Handler = environ[_HANDLER_KEY]
        handler.close_connection = True
        # pywsgi reads (discards) what is left of the body even when it closes: with a
        # declared 2 GiB that never comes, it would wait. Nothing is left to read.
        request_input = handler.wsgi_input
        request_input.chunked_input = False
        request_input.content_length = request_input.position
        return [("Connection", "close")]  # pywsgi says it only for HTTP/1.0

    def take_over(self, environ: Environ):
        handler: Handler = environ[_HANDLER_KEY]
        handler.close_connection = True  # after the application returns: close, not read
        return handler.socket, handler.rfile, None  # pywsgi writes to the socket itself

    def forget_request(self, environ: Environ) -> None:
        handler: Handler = environ[_HANDLER_KEY]
        # pywsgi reads the headers to send the 101 (sent) and the environ to log an error;
        # a cleared environ still serves that. This bought 4.6 KB per idle WebSocket (RSS
        # slope over 1,000 idle connections, in-process; tracemalloc 3.7).
        handler.headers = handler.response_headers = None
        handler.raw_headers = ()
        environ.clear()


class Server(WSGIServer):
    """pywsgi's server, counting connections and knowing each one's handler."""

    def __init__(
        self,
        listener: gevent.socket.socket,
        application,
        state: ServerState,
        new_deadlines: Callable[[], ClientDeadlines],
        ssl_context: ssl.SSLContext | None = None,
    ):
        # TLS arguments only for a TLS case: without them pywsgi hands `handle` the
        # accepted socket itself, as it always did.
        tls = {} if ssl_context is None else _tls_arguments(ssl_context)
        # The pool only tracks connection greenlets (unbounded), so shutdown can wait.
        super().__init__(
            listener,
            application,
            spawn=Pool(),
            log=None,  # no access log: it would cost more than the request
            error_log=None,  # one line per malformed request is not worth stderr
            handler_class=Handler,
            **tls,
        )
        self.state = state
        self.new_deadlines = new_deadlines
        self.stopping = False
        self.handlers: set[Handler] = set()

    def handle(self, sock: gevent.socket.socket, address) -> None:
        # Inherited from the listener on Linux; set explicitly, it costs one syscall.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        handler = self.handler_class(sock, address, self)
        handler.deadlines = self.new_deadlines()  # in this, the connection's greenlet
        self.handlers.add(handler)
        self.state.connection_opened()
        try:
            handler.handle()
        finally:
            handler.deadlines.stop()
            self.handlers.discard(handler)
            self.state.connection_closed()

    def close_connections(self, *, idle_only: bool) -> None:
        """Shut connections down: a read blocked on one returns EOF and its handler ends."""
        for handler in list(self.handlers):
            sock = getattr(handler, "socket", None)  # gone once the handler finished
            if sock is not None and (handler.idle or not idle_only):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def _tls_arguments(context: ssl.SSLContext) -> dict[str, object]:
    """gevent's server TLS arguments for `context`: the handshake on the first read."""
    return {"ssl_context": context, "do_handshake_on_connect": False}


def _green_socket(listener: socket.socket) -> gevent.socket.socket:
    """`listener` (opened before monkey-patching) as a gevent socket on the same descriptor."""
    return gevent.socket.socket(fileno=listener.detach())


def serve(worker: Worker) -> None:
    """Serve `worker` (see servers.frameworks) on gevent's pywsgi and StreamServer."""
    options, listener, state = worker.options, worker.listener, worker.state
    mc_listener = worker.mc_listener
    runtime, threads = gevent_runtime()
    sink = open_green_sink(options, state, runtime)
    backends = GreenBackends(options, state, runtime)
    app = GreenApp(state, sink, backends, GeventConnection(), SERVER_SOFTWARE)
    server = Server(
        _green_socket(listener),
        app.wsgi,
        state,
        deadlines_factory(options, runtime.call_later),
        server_context(options) if options.tls else None,
    )
    mc_service = MemcachedSocketService(backends.memcached, state)
    mc_server: StreamServer | None = None
    if mc_listener is not None:
        mc_server = StreamServer(
            _green_socket(mc_listener),
            lambda sock, _address: mc_service.serve_connection(sock),
            spawn=Pool(),  # unbounded; tracks the connections' greenlets for shutdown
        )
    stop = Event()
    signal_watchers = [gevent.signal_handler(s, stop.set) for s in (signal.SIGTERM, signal.SIGINT)]
    server.start()
    if mc_server is not None:
        mc_server.start()
    background = [gevent.spawn(tick_forever, state), gevent.spawn(report_forever, state)]
    # report_forever's first line, written as soon as this greenlet waits, says we are listening.
    stop.wait()

    server.close()  # stop accepting
    server.stopping = True
    if mc_server is not None:
        mc_server.close()
    with gevent.Timeout(1.0, False):  # a client that reads nothing cannot hold us here
        app.close_websockets()
    server.close_connections(idle_only=True)
    mc_service.close_connections()  # each ends at once, or after its get (≤ 2 s)
    server.pool.join(timeout=CONNECTIONS_GRACE_S)
    # Out of time: cut the rest (a blocked read, even pywsgi's body discard, sees EOF).
    server.close_connections(idle_only=False)
    server.pool.kill(block=True, timeout=1.0)
    if mc_server is not None:
        mc_server.pool.kill(block=True, timeout=0.5)
    gevent.killall(background)
    for watcher in signal_watchers:
        watcher.cancel()
    sink.close()  # drain and flush (≤ 2 s), close the file or the client
    backends.close()
    threads.kill()
    state.emit_telemetry()
