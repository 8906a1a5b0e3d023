"""The green servers' `/ws` route: the RFC 6455 handshake judged from the WSGI environ, the
101 sent through the WSGI server's own `start_response`, then the connection taken over
from the server and handed to a WebSocketSession (servers.runtimes.green.websocket).

Import this only after the framework has monkey-patched the standard library.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import socket
import ssl
from collections.abc import Iterable
from typing import BinaryIO

from servers import contract
from servers.core.error_replies import status_line
from servers.core.state import ServerState
from servers.core.websocket import websocket_handshake_status
from servers.runtimes.green.interfaces import (
    Environ,
    GreenConnection,
    Handler,
    Sink,
    StartResponse,
)
from servers.runtimes.green.replies import EMPTY, Replies
from servers.runtimes.green.websocket import WS_READ_BYTES, WebSocketSession

_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


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


def websocket_route(
    state: ServerState,
    sink: Sink,
    connection: GreenConnection,
    replies: Replies,
    sessions: set[WebSocketSession],
) -> Handler:
    """The `/ws` handler: upgrade, then serve the session in this request's green thread
    until it ends; `sessions` holds it meanwhile (for a shutdown's 1001)."""
    plain = replies.plain
    server_header = replies.server_header
    switching = status_line(101)

    def websocket(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        state.requests += 1
        accept = websocket_handshake(environ)
        if isinstance(accept, tuple):  # refused
            return plain(start_response, *accept)
        sock, reader, writer = connection.take_over(environ)
        connection.deadlines(environ).stop()  # an agent's WebSocket may idle all run
        write = start_response(
            switching,
            [
                ("Upgrade", "websocket"),
                ("Connection", "upgrade"),
                ("Sec-WebSocket-Accept", accept),
                ("Sec-WebSocket-Protocol", contract.WS_SUBPROTOCOL),
                server_header,
            ],
        )
        write(b"")  # sends the 101 now; the socket is the session's from here on
        received = release_buffers(sock, reader, writer)
        connection.forget_request(environ)
        session = WebSocketSession(sock, state, sink, connection.share_turn, received)
        sessions.add(session)
        try:
            session.run()
        finally:
            sessions.discard(session)
        return EMPTY

    return websocket
