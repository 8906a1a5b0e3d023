"""The wire contract on eventlet: `eventlet.wsgi.server` over monkey-patched sockets.

TLS (h1-tls) is eventlet's own: `wsgi.server` is given the listener wrapped by a green
SSL context (servers.core.tls, made after monkey-patching), whose `accept` wraps each
connection without a handshake; the handshake happens at the first read, in the
connection's green thread and under its head deadline.

The memcached socket service (`--mc-socket-port`) is an accept loop spawning one green
thread per connection, each running servers.runtimes.green.backends' shared protocol loop.
"""

from __future__ import annotations

import eventlet

eventlet.monkey_patch()

# ruff: noqa: E402  (everything below must come after monkey-patching)
from eventlet import hubs

from servers.runtimes.green.eventlet_hub import BoundedEpollHub

hubs.use_hub(BoundedEpollHub)  # before anything waits on the hub: a close storm in batches
import contextlib
import errno
import functools
import re
import signal
import socket
import ssl
import sys
from collections.abc import Callable

from eventlet import greenio, greenthread, hubs, tpool, wsgi
from eventlet.green import threading as green_threading
from eventlet.queue import Queue

from servers.contract import ServerOptions
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
from servers.runtimes.green.deadlines import ClientDeadlines, deadlines_factory
from servers.runtimes.green.sinks import GreenRuntime, open_green_sink

SERVER_SOFTWARE = server_software("eventlet", eventlet.__version__)
# Where a request's environ points back at its connection's protocol (to close it).
_PROTOCOL_KEY = "servers.eventlet.protocol"
# How often the main green thread looks for a delivered SIGTERM/SIGINT.
_SIGNAL_POLL_S = 0.05
# After an accept error such as EMFILE, wait this long before accepting again.
_ACCEPT_RETRY_S = 0.01
# A chunk-size line (RFC 9112 §7.1): hex digits, an optional extension, CRLF.
_CHUNK_SIZE_LINE = re.compile(rb"[0-9A-Fa-f]{1,16}(;[^\r\n]*)?\r\n")


class StrictChunkFraming:
    """A chunked request's rfile as eventlet.wsgi.Input reads the body through it, with
    the framing lines checked.

    eventlet.wsgi reads a chunk size with `int(line, 16)`, which takes "0x5" and "+5", and
    reads the line after a chunk's data without looking at it, so "2" followed by five
    bytes gave a two-byte body (a record from a malformed request; on a kept-alive
    connection, a way to smuggle one). Input reads the data with `read` and every framing
    line with `readline`, in the order size line, CRLF after the data, size line, ...,
    last size line "0", trailer fields: a bad line raises ValueError, which the app
    answers 400.
    """

    def __init__(self, rfile) -> None:
        self._rfile = rfile
        self._next_line = "size"  # or "data-end", or "trailer"

    def read(self, *args: int) -> bytes:
        return self._rfile.read(*args)

    def readline(self, *args: int) -> bytes:
        line = self._rfile.readline(*args)
        if self._next_line == "trailer":
            return line
        if self._next_line == "data-end":
            if line != b"\r\n":
                raise ValueError("chunk data longer than its chunk size")
            self._next_line = "size"
            return line
        if not _CHUNK_SIZE_LINE.fullmatch(line):
            raise ValueError("malformed chunk-size line")
        last = int(line.split(b";", 1)[0], 16) == 0
        self._next_line = "trailer" if last else "data-end"
        return line


class Protocol(wsgi.HttpProtocol):
    """eventlet's per-connection HTTP handler, with TCP_NODELAY, a stricter parser and the
    head deadline (servers.runtimes.green.deadlines).

    A missed head deadline is a `ClientTimeout`, a socket timeout to eventlet.wsgi: it
    ends the connection quietly, in the request line or in the headers.

    The overrides that run on every request call HttpProtocol's method by name rather than
    through `super()`: on CPython 3.11 a `super()` call costs 0.09 µs more, and three of
    them ran per request (0.25 µs per keep-alive `GET /`, timeit and in-process).
    """

    def __init__(self, conn_state, server, *, new_deadlines: Callable[[], ClientDeadlines]):
        # eventlet serves the whole connection inside HttpProtocol.__init__, in this, the
        # connection's green thread.
        self.deadlines = new_deadlines()
        try:
            super().__init__(conn_state, server)  # closes the connection when it ends
        except ssl.SSLError:
            # h1-tls: a client whose TLS failed (a broken handshake, a plaintext request);
            # eventlet.wsgi would print its traceback. Nothing to answer: it is closed.
            pass
        finally:
            self.deadlines.stop()

    def setup(self) -> None:
        # Inherited from the listener on Linux; set explicitly, it costs one syscall.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().setup()

    def handle_one_request(self) -> None:
        self.deadlines.await_head()  # from the previous response's end, or the opening
        wsgi.HttpProtocol.handle_one_request(self)

    def parse_request(self) -> bool:
        try:
            parsed = wsgi.HttpProtocol.parse_request(self)  # reads the header lines
        finally:
            self.deadlines.server_busy()
        if not parsed:
            return False
        # http.client's header parser takes a line without a colon for the start of the
        # body and records a defect; the stdlib would serve the request anyway.
        if self.headers.defects:
            self.send_error(400, "Malformed header section")
            return False
        return True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None):
        # A request line the stdlib cannot parse leaves the version at HTTP/0.9, and an
        # HTTP/0.9 error is a bare HTML page without a status line. Answer with one.
        if self.request_version == "HTTP/0.9":
            self.request_version = "HTTP/1.0"
        super().send_error(code, message, explain)

    def get_environ(self) -> Environ:
        environ = wsgi.HttpProtocol.get_environ(self)
        environ[_PROTOCOL_KEY] = self
        request_input = environ["wsgi.input"]
        if request_input.chunked_input:
            request_input.rfile = StrictChunkFraming(request_input.rfile)
        return environ

    def log_message(self, format: str, *args) -> None:
        """No per-request stderr lines from the stdlib handler (eventlet logs are off too)."""


class ConnectionPool(eventlet.GreenPool):
    """The pool `wsgi.server` spawns one green thread into per accepted connection.

    Unbounded (eventlet's default pool stops accepting at 1024 connections); it counts
    connections, opened when spawned and closed when the green thread ends, and keeps
    their sockets so that shutdown can cut the ones that outlive the grace period.
    """

    def __init__(self, state: ServerState) -> None:
        super().__init__(sys.maxsize)
        self._state = state
        self._sockets: dict[greenthread.GreenThread, socket.socket] = {}

    def spawn(self, function, connection, *args, **kwargs):
        # wsgi.server spawns `process_request(connection)`, connection = [address, socket, state]
        self._state.connection_opened()
        thread = super().spawn(function, connection, *args, **kwargs)
        self._sockets[thread] = connection[1]
        thread.link(self._closed)
        return thread

    def _closed(self, thread: greenthread.GreenThread) -> None:
        self._sockets.pop(thread, None)
        self._state.connection_closed()

    def close_connections(self) -> None:
        """Shut every connection down: a read blocked on one returns EOF and its thread ends."""
        for sock in list(self._sockets.values()):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class EventletConnection:
    """`servers.green.GreenConnection` on eventlet.wsgi: it is all in the environ."""

    def request_headers(self, environ: Environ) -> dict[str, str]:
        return dict(environ["headers_raw"])

    def raw_headers(self, environ: Environ) -> tuple[tuple[str, str], ...]:
        return environ["headers_raw"]

    def deadlines(self, environ: Environ) -> ClientDeadlines:
        return environ[_PROTOCOL_KEY].deadlines

    def close_after_response(self, environ: Environ) -> list[tuple[str, str]]:
        # Read when the response goes out: eventlet then adds Connection: close itself,
        # and neither discards the rest of the body nor reads another request.
        environ[_PROTOCOL_KEY].close_connection = 1
        return []

    def share_turn(self) -> None:
        """Nothing: the hub hands out at most READY_SOCKETS_PER_TURN sockets a turn
        (servers.runtimes.green.eventlet_hub)."""

    def take_over(self, environ: Environ):
        request_input = environ["eventlet.input"]
        # What eventlet.websocket does too: nothing more is written for this request, and
        # the connection closes once the application returns.
        wsgi.WSGI_LOCAL.already_handled = True
        # The HttpProtocol's own reader (Input's may be wrapped) and the writer the 101
        # goes out through; socketserver's `finish` skips them once they are closed.
        protocol = environ[_PROTOCOL_KEY]
        return request_input.get_socket(), protocol.rfile, protocol.wfile

    def forget_request(self, environ: Environ) -> None:
        # eventlet.wsgi reads the headers to send the 101 (sent), and the environ's
        # posthooks once the application returns: those stay. This bought 4.3 KB per idle
        # WebSocket (RSS slope over 1,000 idle connections, in-process; tracemalloc 3.2).
        environ[_PROTOCOL_KEY].headers = None
        posthooks = environ["eventlet.posthooks"]
        environ.clear()
        environ["eventlet.posthooks"] = posthooks


def _accept_socket_service(
    listener: greenio.GreenSocket, service: MemcachedSocketService, pool: eventlet.GreenPool
) -> None:
    """The socket service's accept loop: one green thread per connection, until killed."""
    while True:
        try:
            sock, _address = listener.accept()
        except OSError as error:
            if error.errno == errno.EBADF:  # the listener was closed
                return
            eventlet.sleep(_ACCEPT_RETRY_S)  # out of descriptors or memory: try again soon
            continue
        pool.spawn(service.serve_connection, sock)


def _green_socket(listener: socket.socket) -> greenio.GreenSocket:
    """`listener` (opened before monkey-patching) as a green socket on the same descriptor.

    Not `GreenSocket(listener)`: that listener's `accept` is the standard library's, which
    after monkey-patching makes each connection a GreenSocket, and the green `accept`
    wrapped that in a second one, a layer every socket call went through. One layer
    bought 0.2 KB per connection (tracemalloc, 1,000 idle WebSockets; within the RSS
    slope's noise).
    """
    return greenio.GreenSocket(
        listener.family, listener.type, listener.proto, fileno=listener.detach()
    )


def _http_socket(options: ServerOptions, listener: socket.socket) -> greenio.GreenSocket:
    """The listener as eventlet.wsgi accepts on it: green, and TLS-wrapped for a TLS case."""
    green = _green_socket(listener)
    if not options.tls:
        return green
    return server_context(options).wrap_socket(green, server_side=True)


def _call_later(seconds: float, function: Callable[[], None]) -> Callable[[], None]:
    """`function` on the hub after `seconds` (GreenRuntime.call_later); returns its cancel."""
    return hubs.get_hub().schedule_call_global(seconds, function).cancel


def _wait_for_signal(signums: tuple[int, ...]) -> None:
    """Return once SIGTERM or SIGINT arrived.

    A Python signal handler may run inside the hub between any two bytecodes, where
    switching or scheduling green threads is unsafe, so it only records the signal.
    """
    received: list[int] = []
    for signum in signums:
        signal.signal(signum, lambda signum, _frame: received.append(signum))
    while not received:
        eventlet.sleep(_SIGNAL_POLL_S)


def serve(worker: Worker) -> None:
    """Serve `worker` (see servers.frameworks) on eventlet.wsgi and a green accept loop."""
    options, listener, state = worker.options, worker.listener, worker.state
    mc_listener = worker.mc_listener
    runtime = GreenRuntime(
        spawn=eventlet.spawn,
        event=green_threading.Event,  # resettable, wait(timeout) -> bool, green locks
        run_in_thread=tpool.execute,  # the file sink's writes, on eventlet's real threads
        queue=Queue,
        call_later=_call_later,
    )
    sink = open_green_sink(options, state, runtime)
    backends = GreenBackends(options, state, runtime)
    app = GreenApp(state, sink, backends, EventletConnection(), SERVER_SOFTWARE)
    pool = ConnectionPool(state)
    server_thread = eventlet.spawn(
        wsgi.server,
        _http_socket(options, listener),
        app.wsgi,
        custom_pool=pool,
        # marked deprecated in the docstring, still the only hook
        protocol=functools.partial(
            Protocol, new_deadlines=deadlines_factory(options, runtime.call_later)
        ),
        log_output=False,  # no access log: it would cost more than the request
        debug=False,  # no tracebacks in 500 bodies
        # Our header names are written as they should go out (servers.runtimes.green.app);
        # eventlet's re-capitalising each name of each response cost 2.4 µs per keep-alive
        # `GET /` (in-process; the minimal app, left at the default, still pays it).
        capitalize_response_headers=False,
    )
    mc_service = MemcachedSocketService(backends.memcached, state)
    mc_pool = eventlet.GreenPool(sys.maxsize)  # unbounded; tracks connections for shutdown
    mc_accept: greenthread.GreenThread | None = None
    mc_socket: greenio.GreenSocket | None = None
    if mc_listener is not None:
        mc_socket = _green_socket(mc_listener)
        mc_accept = eventlet.spawn(_accept_socket_service, mc_socket, mc_service, mc_pool)
    background = [eventlet.spawn(tick_forever, state), eventlet.spawn(report_forever, state)]
    # wsgi.server and report_forever run once this thread waits: the first line says listening.
    _wait_for_signal((signal.SIGTERM, signal.SIGINT))

    # Killing wsgi.server stops accepting, closes idle keep-alive connections, and leaves
    # it waiting for busy ones, which close after their current request.
    server_thread.kill()
    if mc_accept is not None and mc_socket is not None:
        mc_accept.kill()
        mc_socket.close()
    with eventlet.Timeout(1.0, False):  # a client that reads nothing cannot hold us here
        app.close_websockets()
    mc_service.close_connections()  # each ends at once, or after its get (≤ 2 s)
    with eventlet.Timeout(CONNECTIONS_GRACE_S, False):
        pool.waitall()
        mc_pool.waitall()
    # Out of time: cut the rest (a blocked read, even eventlet's body discard, sees EOF).
    pool.close_connections()
    with eventlet.Timeout(1.0, False):
        pool.waitall()
    for thread in [*pool.coroutines_running, *mc_pool.coroutines_running]:
        thread.kill()
    for thread in background:
        thread.kill()
    sink.close()  # drain and flush (≤ 2 s), close the file or the client
    backends.close()
    state.emit_telemetry()
