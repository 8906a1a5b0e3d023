"""tornado's HTTPServer with the contract's connection rules: every TCP connection counted
(WebSockets included), and a header line over the limit answered 400 instead of a reset."""

from __future__ import annotations

import contextlib
from typing import Any

import tornado.httpserver
import tornado.iostream

from servers.core.state import ServerState

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
