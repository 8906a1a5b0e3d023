"""The wire contract as one WSGI application on green blocking sockets (gevent, eventlet).

Both frameworks run WSGI over monkey-patched, cooperatively scheduled blocking sockets, so
the routing, `/counter`, `/log`, the backend routes (`/files`, `/gridfs`, `/mc`, reading
through servers.runtimes.green.backends) and the `/ws` session are written once here. A framework
module supplies only what its server makes different: how the application reaches a
request's headers as sent and its connection's slow-client deadlines
(servers.runtimes.green.deadlines: the framework keeps the head's, the application the
body's), and how it takes the connection over after a WebSocket upgrade.

The WebSocket session speaks RFC 6455 framing through wsproto (sans-IO) over the green
socket: the handshake goes out through the WSGI server's own `start_response`, then the
session reads frames until the close handshake ends.

Import this only after the framework has monkey-patched the standard library: the
`threading.Lock` and `time.monotonic` used here are then the green ones.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import select
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterable
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, BinaryIO, Protocol

from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Event, Ping, TextMessage
from wsproto.extensions import Extension
from wsproto.frame_protocol import CloseReason, Opcode, RsvBits

from servers import contract
from servers.core import memcache, static
from servers.core.backends import BackendUnavailable
from servers.core.framing import framing_error
from servers.core.shutdown import WS_SHUTDOWN_REASON
from servers.core.sinks import SinkUnavailable
from servers.core.state import ServerState
from servers.core.websocket import (
    LingerDrain,
    websocket_handshake_status,
)
from servers.core.ws_messages import take_message
from servers.runtimes.green.backends import GreenBackends, read_file
from servers.runtimes.green.deadlines import ClientDeadlines, ClientTimeout
from servers.runtimes.green.workloads import workload_routes

# A WSGI application: environ and start_response in, body chunks out.
StartResponse = Callable[..., Callable[[bytes], Any]]
Environ = dict[str, Any]
Headers = list[tuple[str, str]]

# How long a closing WebSocket waits for the client's close frame (aiohttp waits 10 s too).
WS_CLOSE_TIMEOUT_S = 10.0
WS_READ_BYTES = 64 * 1024
# A body no route reads is read and dropped in pieces of this size.
DRAIN_READ_BYTES = 64 * 1024
# A WebSocket session busy on data already received gives the loop a turn this often.
_YIELD_EVERY_S = 0.005
_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_EMPTY: tuple[bytes, ...] = ()


class Sink(Protocol):
    """A green sink (`servers.runtimes.green.sinks`): its calls block the calling green thread."""

    def store(self, record: dict[str, Any]) -> None:
        """Accept a WebSocket message's record; it is stored later (fire and forget)."""
        ...

    def store_and_wait(self, record: dict[str, Any]) -> None:
        """Return once the record is stored; raise `SinkUnavailable` when it cannot be."""
        ...


class DeclaredSizeLimit(Extension):
    """A wsproto hook on every frame header: a frame whose declared length takes its message
    over contract.WS_MAX_MESSAGE_BYTES is refused with 1009 at once, before its payload
    arrives (a header declaring 2 GiB is not answered only once 1 MiB came in).

    Never negotiated (no Sec-WebSocket-Extensions): wsproto runs an extension's hooks when
    it is handed to the `Connection`, which is all this needs; it claims no RSV bit.
    """

    name = "declared-size-limit"

    def __init__(self) -> None:
        self._message_bytes = 0

    def enabled(self) -> bool:
        return True

    def offer(self) -> bool:
        return False

    def frame_inbound_header(
        self, proto: Any, opcode: Opcode, rsv: RsvBits, payload_length: int
    ) -> CloseReason | RsvBits:
        if not opcode.iscontrol():
            if opcode is not Opcode.CONTINUATION:
                self._message_bytes = 0
            self._message_bytes += payload_length
            if self._message_bytes > contract.WS_MAX_MESSAGE_BYTES:
                return CloseReason.MESSAGE_TOO_BIG
        return RsvBits(False, False, False)


class GreenConnection(Protocol):
    """What the framework lets the application do with the connection under a request."""

    def request_headers(self, environ: Environ) -> dict[str, str]:
        """The request's headers as the client sent them (names in their own case)."""
        ...

    def raw_headers(self, environ: Environ) -> Iterable[tuple[str, str]]:
        """The request's header fields as received: every repeat, nothing dropped yet."""
        ...

    def deadlines(self, environ: Environ) -> ClientDeadlines:
        """The slow-client deadlines of the connection the request came on."""
        ...

    def close_after_response(self, environ: Environ) -> Headers:
        """Close the connection once this response is out, reading nothing more from it;
        the headers the response must carry to say so (none if the server adds them)."""
        ...

    def take_over(self, environ: Environ) -> tuple[socket.socket, BinaryIO, BinaryIO | None]:
        """The socket, its buffered reader and its buffered writer (None where the server
        writes to the socket itself), after telling the server to send nothing more on
        this connection and to close it once the application returns. The application
        closes the reader and the writer once the 101 is out (`release_buffers`): the
        server must not use them after that."""
        ...

    def forget_request(self, environ: Environ) -> None:
        """Once the 101 is out: drop what the server keeps of the upgrade request (its
        parsed headers, the environ's contents) for the rest of the connection; the
        server reads none of it after the application returns."""
        ...

    def share_turn(self) -> None:
        """Called by a WebSocket session woken by its socket, before it works on what came:
        where the framework's loop wakes every ready socket's green thread in one turn, it
        defers the work past a bounded number a turn (a close storm in batches, the tick
        between them); where its hub hands out a bounded number already, it does nothing."""
        ...


def server_software(framework: str, version: str) -> str:
    """The Server header, in aiohttp's shape: `Python/3.11 gevent/24.2.1`."""
    return f"Python/{sys.version_info.major}.{sys.version_info.minor} {framework}/{version}"


def _status_line(code: int) -> str:
    return f"{code} {HTTPStatus(code).phrase}"


class DatedHeaders:
    """A response's fixed headers plus this second's `Date`, the list made once a second.

    pywsgi and eventlet.wsgi format a Date for each response that carries none
    (time.gmtime and a %-format: 1.25 µs) and add none to one that does. On the text
    route this bought 1.3 µs per keep-alive `GET /` on gevent and 1.5 µs on eventlet
    (in-process, net of the framework checking and encoding one more header; the minimal
    apps still format theirs). The list is shared by every response of the second: the
    frameworks only read it (both append a Content-Length only where there is none).
    """

    __slots__ = ("_fixed", "_headers", "_second")

    def __init__(self, fixed: Headers) -> None:
        self._fixed = fixed
        self._second = -1
        self._headers = fixed

    def now(self) -> Headers:
        """The fixed headers and a Date (RFC 9110 IMF-fixdate) of the current second."""
        second = int(time.time())
        if second != self._second:
            self._headers = [*self._fixed, ("Date", formatdate(second, usegmt=True))]
            self._second = second
        return self._headers


class GreenApp:
    """The contract's routes as a WSGI callable (`wsgi`), plus the open WebSockets."""

    def __init__(
        self,
        state: ServerState,
        sink: Sink,
        backends: GreenBackends,
        connection: GreenConnection,
        server_software: str,
    ) -> None:
        self.websockets: set[WebSocketSession] = set()
        self._state = state
        self._sink = sink
        self._backends = backends
        self._connection = connection
        self._server_header = ("Server", server_software)
        self.wsgi = self._make_wsgi()

    def close_websockets(self) -> None:
        """Server shutdown: send every open WebSocket a 1001 close (they end on the reply)."""
        for session in list(self.websockets):
            session.go_away()

    # -- responses -------------------------------------------------------------------
    def _headers(self, content_type: str, body: bytes) -> Headers:
        return [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            self._server_header,
        ]

    def _plain(
        self,
        start_response: StartResponse,
        code: int,
        body: bytes | None = None,
        extra: Iterable[tuple[str, str]] = (),
    ) -> tuple[bytes, ...]:
        """An error answer shaped like aiohttp's: `404: Not Found`, text/plain."""
        if body is None:
            body = f"{code}: {HTTPStatus(code).phrase}".encode()
        headers = self._headers("text/plain; charset=utf-8", body)
        headers.extend(extra)
        start_response(_status_line(code), headers)
        return (body,)

    # -- the application -----------------------------------------------------------------
    def _make_wsgi(self) -> Callable[[Environ, StartResponse], Iterable[bytes]]:
        state = self._state
        sink = self._sink
        connection = self._connection
        plain = self._plain
        # The hot path answers from precomputed values: one header list, one body tuple.
        text_headers = DatedHeaders(
            self._headers(contract.TEXT_CONTENT_TYPE, contract.TEXT_BODY)
        ).now
        text_result = (contract.TEXT_BODY,)
        log_headers = self._headers(contract.TEXT_CONTENT_TYPE, contract.LOG_REPLY_BODY)
        log_result = (contract.LOG_REPLY_BODY,)
        ok = _status_line(200)
        max_body_bytes = contract.LOG_MAX_BODY_BYTES

        def refuse(environ: Environ, start_response: StartResponse, code: int) -> Iterable[bytes]:
            """Answer `code` and close: what is left on the connection cannot be trusted."""
            return plain(start_response, code, extra=connection.close_after_response(environ))

        def text(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
            state.requests += 1
            start_response(ok, text_headers())
            return text_result

        def text_head(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
            state.requests += 1
            start_response(ok, text_headers())
            return _EMPTY

        def counter(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
            state.requests += 1
            body = state.counter_payload()
            start_response(ok, self._headers(contract.JSON_CONTENT_TYPE, body))
            return _EMPTY if environ["REQUEST_METHOD"] == "HEAD" else (body,)

        def log(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
            state.requests += 1
            declared = environ.get("CONTENT_LENGTH")
            length = int(declared) if declared else None  # digits: framing_error checked
            if length is not None and length > max_body_bytes:
                return refuse(environ, start_response, 413)  # at once, nothing read
            deadlines = connection.deadlines(environ)
            deadlines.await_body()
            try:
                body = environ["wsgi.input"].read(max_body_bytes + 1)
            except ClientTimeout:  # before OSError: it is one
                return refuse(environ, start_response, 408)
            except (OSError, ValueError):  # the body ended early, or bad chunked framing
                return refuse(environ, start_response, 400)
            finally:
                deadlines.server_busy()
            if len(body) > max_body_bytes:  # a chunked body
                return refuse(environ, start_response, 413)
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
            start_response(ok, log_headers)
            return _EMPTY if method == "HEAD" else log_result

        def websocket(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
            state.requests += 1
            accept = websocket_handshake(environ)
            if isinstance(accept, tuple):  # refused
                return plain(start_response, *accept)
            sock, reader, writer = connection.take_over(environ)
            connection.deadlines(environ).stop()  # an agent's WebSocket may idle all run
            write = start_response(
                _status_line(101),
                [
                    ("Upgrade", "websocket"),
                    ("Connection", "upgrade"),
                    ("Sec-WebSocket-Accept", accept),
                    ("Sec-WebSocket-Protocol", contract.WS_SUBPROTOCOL),
                    self._server_header,
                ],
            )
            write(b"")  # sends the 101 now; the socket is the session's from here on
            received = release_buffers(sock, reader, writer)
            connection.forget_request(environ)
            session = WebSocketSession(sock, state, sink, connection.share_turn, received)
            self.websockets.add(session)
            try:
                session.run()
            finally:
                self.websockets.discard(session)
            return _EMPTY

        # -- backend routes: the name or key is the rest of the (percent-decoded) path --
        backends = self._backends
        files_dir = backends.files_dir
        gridfs = backends.gridfs
        memcached = backends.memcached
        not_found = contract.NOT_FOUND_BODY
        unavailable = contract.BACKEND_UNAVAILABLE_BODY
        files_start = len(contract.ROUTE_FILES_PREFIX)
        gridfs_start = len(contract.ROUTE_GRIDFS_PREFIX)
        mc_start = len(contract.ROUTE_MEMCACHED_PREFIX)

        def found(
            environ: Environ, start_response: StartResponse, content_type: str, body: bytes
        ) -> Iterable[bytes]:
            start_response(ok, self._headers(content_type, body))
            return _EMPTY if environ["REQUEST_METHOD"] == "HEAD" else (body,)

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

        # path -> method -> handler; "*" answers any method the path does not list.
        routes = {
            contract.ROUTE_TEXT: {"GET": text, "HEAD": text_head},
            contract.ROUTE_COUNTER: {"GET": counter, "HEAD": counter},
            contract.ROUTE_LOG: {"*": log},
            contract.ROUTE_WEBSOCKET: {"GET": websocket},
        }
        # Looked up only when no exact route matched: `/` pays nothing for them.
        prefix_routes = {
            contract.ROUTE_FILES_PREFIX: {"GET": files, "HEAD": files},
            contract.ROUTE_GRIDFS_PREFIX: {"GET": gridfs_file, "HEAD": gridfs_file},
            contract.ROUTE_MEMCACHED_PREFIX: {"GET": mc, "HEAD": mc},
        }
        workload_exact, workload_prefixes = workload_routes(
            state, connection.deadlines, self._headers, plain, refuse
        )
        routes |= workload_exact
        prefix_routes |= workload_prefixes
        reads_own_body = (contract.ROUTE_LOG, contract.ROUTE_UPLOAD)
        allow = {
            path: [("Allow", ",".join(sorted(m)))]
            for path, m in [*routes.items(), *prefix_routes.items()]
        }

        def drain_body(environ: Environ) -> int | None:
            """Read and drop the body of a request whose route does not read it, within the
            body deadline: None, or the status to refuse the request with. Left to the
            framework, it would be discarded after the response with no deadline at all."""
            request_body = environ["wsgi.input"]
            deadlines = connection.deadlines(environ)
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

        def wsgi(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
            # pywsgi and eventlet.wsgi frame bodies by rules a smuggler can exploit
            # ("xchunked", two Content-Lengths, "+3"): refuse before any body is read.
            if framing_error(connection.raw_headers(environ)) is not None:
                return refuse(environ, start_response, 400)
            path = environ["PATH_INFO"]
            if (
                environ.get("CONTENT_LENGTH") or "HTTP_TRANSFER_ENCODING" in environ
            ) and path not in reads_own_body:  # /log and /upload read their own
                refusal = drain_body(environ)
                if refusal is not None:
                    return refuse(environ, start_response, refusal)
            methods = routes.get(path)
            if methods is None:
                prefix = next((p for p in prefix_routes if path.startswith(p)), None)
                if prefix is None:
                    return plain(start_response, 404)
                path = prefix
                methods = prefix_routes[prefix]
            handler = methods.get(environ["REQUEST_METHOD"]) or methods.get("*")
            if handler is None:
                return plain(start_response, 405, extra=allow[path])
            return handler(environ, start_response)

        return wsgi


def tick_forever(state: ServerState) -> None:
    """The 10 ms tick probe in a green thread of its own (green `time.sleep`), until killed."""
    while True:
        time.sleep(contract.TICK_INTERVAL_S)
        state.tick()


def report_forever(state: ServerState) -> None:
    """One telemetry line now (it says the port is listening), then one a second."""
    while True:
        state.emit_telemetry()
        time.sleep(contract.TELEMETRY_INTERVAL_S)


def websocket_handshake(environ: Environ) -> str | tuple[int, bytes]:
    """A `/ws` request's Sec-WebSocket-Accept token when it may be upgraded, else the
    status and body that refuse it."""
    refusal = websocket_handshake_status(
        environ.get("HTTP_ORIGIN"), environ.get("HTTP_SEC_WEBSOCKET_PROTOCOL")
    )
    if refusal is not None:
        return refusal, str(refusal).encode()
    accept = _accept_token(environ)
    return (400, b"400: not a WebSocket handshake") if accept is None else accept


def _accept_token(environ: Environ) -> str | None:
    """Sec-WebSocket-Accept for a valid RFC 6455 upgrade request, else None."""
    if environ.get("HTTP_UPGRADE", "").lower() != "websocket":
        return None
    tokens = {t.strip().lower() for t in environ.get("HTTP_CONNECTION", "").split(",")}
    if "upgrade" not in tokens or environ.get("HTTP_SEC_WEBSOCKET_VERSION") != "13":
        return None
    key = environ.get("HTTP_SEC_WEBSOCKET_KEY", "").strip()
    try:
        if len(base64.b64decode(key, validate=True)) != 16:
            return None
    except (binascii.Error, ValueError):
        return None
    digest = hashlib.sha1(key.encode("ascii") + _WS_GUID).digest()
    return base64.b64encode(digest).decode("ascii")


def release_buffers(sock: socket.socket, reader: BinaryIO, writer: BinaryIO | None) -> bytes:
    """Close the WSGI server's buffered reader and writer of a connection a WebSocket took
    over, which frees their buffers; the bytes the reader held past the upgrade request
    (frames a client sent before the 101 came), taken without waiting for more.

    The session reads the socket itself (`WebSocketSession._read`): the reader's 8 KB
    buffer (pywsgi's and eventlet.wsgi's alike) and eventlet.wsgi's 16 KB writer buffer
    would otherwise live as long as the connection. Closing them bought 4.9 KB per idle
    WebSocket on gevent and 8.0 KB on eventlet (the server's RSS slope over 1,000 idle
    connections; tracemalloc: 8 KB and 24 KB fewer bytes allocated per connection).
    """
    timeout_s = sock.gettimeout()
    sock.settimeout(0.0)  # a read that would wait returns nothing, or raises at once
    try:
        received = reader.read1(WS_READ_BYTES)  # what is buffered, if anything
    # Nothing buffered: gevent's TLS socket raises SSLWantReadError, eventlet's a timeout
    # (its 0.0 is a timeout, not non-blocking mode); the plain sockets return nothing.
    except (BlockingIOError, ssl.SSLWantReadError, TimeoutError):
        received = b""
    finally:
        sock.settimeout(timeout_s)
    reader.close()
    if writer is not None:
        writer.close()  # the 101 was flushed through it: nothing is left to write
    return received


def _yield_to_the_loop() -> float:
    """Let every other green thread, timer and socket have a turn; the next deadline.

    A sleep > 0 (green after monkey-patching) resumes after one turn of the event loop;
    gevent runs `sleep(0)` callbacks back to back, ~50 of them before it looks at timers.
    """
    time.sleep(1e-6)
    return time.monotonic() + _YIELD_EVERY_S


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


class WebSocketSession:
    """One server-side WebSocket after the handshake: read, judge, store, close.

    The session's own greenlet reads and answers; the only other sender is `go_away`,
    called from the shutdown greenlet, so sends are serialised by a (green) lock.
    """

    def __init__(
        self,
        sock: socket.socket,
        state: ServerState,
        sink: Sink,
        share_turn: Callable[[], None],
        received: bytes = b"",
    ) -> None:
        """`received`: bytes of the connection that came before the session (frames the
        WSGI server read past the upgrade request), handled before the socket is read."""
        self._sock = sock
        self._received = received
        self._share_turn = share_turn
        self._state = state
        self._sink = sink
        self._ws = Connection(ConnectionType.SERVER, extensions=[DeclaredSizeLimit()])
        self._send_lock = threading.Lock()
        self._going_away = False

    def go_away(self) -> None:
        """Start the closing handshake with 1001 (server shutdown); safe from any greenlet."""
        self._going_away = True
        # If the session is sending right now, it sees the flag before its next read.
        if self._send_lock.acquire(blocking=False):
            try:
                self._close_locked(contract.WS_CLOSE_GOING_AWAY, WS_SHUTDOWN_REASON)
            except OSError:
                pass
            finally:
                self._send_lock.release()

    def run(self) -> None:
        """Serve until the closing handshake completes, the peer vanishes, or time runs out."""
        with contextlib.suppress(OSError):  # reset, broken pipe, close timeout: gone
            self._run()

    def _run(self) -> None:
        ws = self._ws
        state = self._state
        parts: list[str] = []
        size = 0
        closing_deadline: float | None = None
        yield_at = time.monotonic() + _YIELD_EVERY_S
        while ws.state is not ConnectionState.CLOSED:
            if self._going_away and ws.state is ConnectionState.OPEN:
                self._close(contract.WS_CLOSE_GOING_AWAY, WS_SHUTDOWN_REASON)
            if ws.state is ConnectionState.LOCAL_CLOSING:
                # Waiting for the client's close frame: bounded, whatever it still sends.
                if closing_deadline is None:
                    closing_deadline = time.monotonic() + WS_CLOSE_TIMEOUT_S
                remaining_s = closing_deadline - time.monotonic()
                if remaining_s <= 0:
                    return
                self._sock.settimeout(remaining_s)
            data = self._read()
            self._share_turn()
            # A read that finds data waiting does not switch to the hub: without these
            # yields one client sending without pause starves every other green thread
            # (ticks, telemetry, the sink's writer, shutdown: 4.5 s tick gaps measured).
            if time.monotonic() >= yield_at:
                yield_at = _yield_to_the_loop()
            ws.receive_data(data or None)  # None: EOF, wsproto reports 1006 and CLOSED
            for event in ws.events():
                if time.monotonic() >= yield_at:  # a 64 KiB read holds ~5,000 messages
                    yield_at = _yield_to_the_loop()
                if isinstance(event, TextMessage):
                    if ws.state is not ConnectionState.OPEN:
                        continue  # the rest of a message after our close: dropped
                    # Judge the size as it arrives: an oversized message is never buffered.
                    size += _utf8_size(event.data)
                    if size > contract.WS_MAX_MESSAGE_BYTES:
                        parts.clear()
                        state.bad += 1
                        self._close(contract.WS_CLOSE_TOO_BIG, "message too big")
                        continue
                    parts.append(event.data)
                    if not event.message_finished:
                        continue
                    text = parts[0] if len(parts) == 1 else "".join(parts)
                    parts.clear()
                    size = 0
                    close_code = take_message(state, self._sink, text)
                    if close_code == contract.WS_CLOSE_TRY_AGAIN_LATER:
                        self._close(close_code, "sink busy")
                    elif close_code is not None:
                        self._close(close_code)
                elif isinstance(event, BytesMessage):
                    if ws.state is ConnectionState.OPEN:
                        state.bad += 1
                        self._close(contract.WS_CLOSE_UNSUPPORTED_DATA, "binary message")
                elif isinstance(event, Ping):
                    if ws.state is ConnectionState.OPEN:
                        self._send(event.response())
                elif isinstance(event, CloseConnection):
                    if ws.state is ConnectionState.REMOTE_CLOSING:
                        # The client closes: answer as aiohttp does (1000), then we are done.
                        self._send(CloseConnection(code=contract.WS_CLOSE_NORMAL))
                    elif ws.state is ConnectionState.OPEN:
                        # wsproto could not parse the stream (bad UTF-8, bad framing, a
                        # frame over the size limit): fail the connection with its code; the
                        # parser cannot go on, the client may still be sending.
                        state.bad += 1
                        self._close(event.code, event.reason)
                        self._linger()
                        return
                    else:
                        return  # our close was answered, or the peer vanished

    def _linger(self) -> None:
        """After a close that failed the connection: half-close (the client reads the close
        frame, then EOF), and read and drop what it still sends until it closes, at most
        WS_LINGER_S and WS_LINGER_MAX_BYTES (servers.core.websocket: closing on unread bytes
        resets the connection, and over TLS the reset cost clients the 1009)."""
        # On an SSL socket this drops TLS (no close_notify): what is drained is not read.
        self._sock.shutdown(socket.SHUT_WR)
        linger = LingerDrain(time.monotonic())
        yield_at = time.monotonic() + _YIELD_EVERY_S
        while True:
            remaining_s = linger.remaining_s(time.monotonic())
            if remaining_s <= 0:
                return
            self._sock.settimeout(remaining_s)
            try:
                data = self._sock.recv(WS_READ_BYTES)
            except BlockingIOError:  # eventlet's SSL socket, TLS dropped, does not wait
                select.select([self._sock], [], [], remaining_s)
                continue
            if not data or not linger.drop(len(data)):
                return
            if time.monotonic() >= yield_at:  # a client sending without pause starves none
                yield_at = _yield_to_the_loop()

    def _read(self) -> bytes:
        """The next bytes from the client (b"": EOF), straight from the socket.

        Not through a buffered reader: its `read1` allocates its 64 KB result before it
        waits, so every idle session held one. The green socket's `recv` waits for data
        before it allocates: this bought 4.4 KB per idle WebSocket on gevent and eventlet
        alike (the server's RSS slope over 1,000 idle connections; tracemalloc: 64 KB
        fewer bytes allocated per connection, most of them never touched).
        """
        if self._received:
            received, self._received = self._received, b""
            return received
        return self._sock.recv(WS_READ_BYTES)

    def _send(self, event: Event) -> None:
        with self._send_lock:
            if self._ws.state in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
                self._sock.sendall(self._ws.send(event))

    def _close(self, code: int, reason: str = "") -> None:
        with self._send_lock:
            self._close_locked(code, reason)

    def _close_locked(self, code: int, reason: str = "") -> None:
        if self._ws.state is ConnectionState.OPEN:
            self._sock.sendall(self._ws.send(CloseConnection(code=code, reason=reason)))
