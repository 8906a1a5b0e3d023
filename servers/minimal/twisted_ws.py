"""Minimal twisted WebSocket server: autobahn's `WebSocketServerProtocol` and factory
on the reactor (epoll), echoing, as autobahn's echo example writes it."""

import re
import socket

from autobahn.twisted.websocket import WebSocketServerFactory, WebSocketServerProtocol
from autobahn.websocket.types import ConnectionRequest

from servers.contract import WS_SUBPROTOCOL

ORIGIN_LINE = re.compile(rb"(?im)^origin:[^\r\n]*\r\n")


class Echo(WebSocketServerProtocol):
    def processHandshake(self) -> None:
        # autobahn refuses an Origin without a host part (the agent's `agent`); ours drops
        # the header before autobahn reads it too (servers/frameworks/twisted/routes.py)
        self.data = ORIGIN_LINE.sub(b"", self.data)
        super().processHandshake()

    def onConnect(self, request: ConnectionRequest) -> str | None:
        return WS_SUBPROTOCOL if WS_SUBPROTOCOL in request.protocols else None

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        self.sendMessage(payload, isBinary)


def run(host: str, port: int) -> None:
    from twisted.internet import reactor

    factory = WebSocketServerFactory()
    factory.protocol = Echo
    reactor.listenTCP(port, factory, interface=host)
    reactor.run()


def serve(listener: socket.socket) -> None:
    """Serve on `listener`, one of a parent's SO_REUSEPORT sockets
    (`python -m servers.minimal NAME --ws --workers N`)."""
    from twisted.internet import reactor

    factory = WebSocketServerFactory()
    factory.protocol = Echo
    listener.setblocking(False)  # Twisted accepts in a loop until EAGAIN
    reactor.adoptStreamPort(listener.fileno(), listener.family, factory)
    listener.close()  # the reactor holds its own duplicate of the descriptor
    reactor.run()
