"""The WebSocket echo session of the green minimal servers (gevent, eventlet), on wsproto.

wsproto is the library our green servers speak WebSocket with (servers.runtimes.green.app);
this is its own example server's loop (`WSConnection` over a blocking socket: the handshake
through its h11 layer, then frames), with the route and the contract's subprotocol added.
Gevent and eventlet both call `handle(sock, address)` in a green thread per connection.
"""

from __future__ import annotations

import socket

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    Request,
)
from wsproto.utilities import RemoteProtocolError

from servers.contract import ROUTE_WEBSOCKET, WS_SUBPROTOCOL

READ_BYTES = 64 * 1024


def handle(sock: socket.socket, address: object) -> None:
    """Serve one connection: accept a `/ws` handshake, echo messages, answer pings and
    the client's close; anything else is refused (400, 404) and the connection closed."""
    ws = WSConnection(ConnectionType.SERVER)
    try:
        while ws.state is not ConnectionState.CLOSED:
            data = sock.recv(READ_BYTES)
            try:
                ws.receive_data(data or None)  # None: EOF
            except RemoteProtocolError as error:  # not a WebSocket handshake
                sock.sendall(ws.send(error.event_hint))
                return
            out = b""
            for event in ws.events():
                if isinstance(event, Request):
                    if event.target != ROUTE_WEBSOCKET:
                        sock.sendall(ws.send(RejectConnection(status_code=404)))
                        return
                    out += ws.send(AcceptConnection(subprotocol=WS_SUBPROTOCOL))
                elif isinstance(event, Message):
                    out += ws.send(Message(data=event.data))
                elif isinstance(event, Ping) or (  # a ping; the client's close (not EOF's)
                    isinstance(event, CloseConnection)
                    and ws.state is ConnectionState.REMOTE_CLOSING
                ):
                    out += ws.send(event.response())
            if out:
                sock.sendall(out)
            if not data:
                return
    except OSError:  # reset, broken pipe: the client is gone
        return
    finally:
        sock.close()
