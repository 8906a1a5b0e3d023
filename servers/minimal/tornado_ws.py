"""Minimal tornado WebSocket server: one `WebSocketHandler` on /ws, echoing."""

import asyncio
import socket

import tornado.httpserver
import tornado.web
import tornado.websocket

from servers.contract import ROUTE_WEBSOCKET, WS_SUBPROTOCOL


class Echo(tornado.websocket.WebSocketHandler):
    def check_origin(self, origin: str) -> bool:
        return True  # the agent's Origin is a name, not this host's URL (tornado's default)

    def select_subprotocol(self, subprotocols: list[str]) -> str | None:
        return WS_SUBPROTOCOL if WS_SUBPROTOCOL in subprotocols else None

    def on_message(self, message: str | bytes) -> None:
        self.write_message(message, binary=isinstance(message, bytes))


async def main(host: str, port: int) -> None:
    app = tornado.web.Application([(ROUTE_WEBSOCKET, Echo)], log_function=lambda handler: None)
    app.listen(port, address=host)
    await asyncio.Event().wait()


def run(host: str, port: int) -> None:
    asyncio.run(main(host, port))


async def main_on(listener: socket.socket) -> None:
    app = tornado.web.Application([(ROUTE_WEBSOCKET, Echo)], log_function=lambda handler: None)
    listener.setblocking(False)  # tornado accepts in a loop until EWOULDBLOCK
    tornado.httpserver.HTTPServer(app).add_sockets([listener])
    await asyncio.Event().wait()


def serve(listener: socket.socket) -> None:
    """Serve on `listener`, one of a parent's SO_REUSEPORT sockets
    (`python -m servers.minimal NAME --ws --workers N`)."""
    asyncio.run(main_on(listener))
