"""Minimal aiohttp WebSocket server: `web.WebSocketResponse` on /ws, echoing."""

import socket

from aiohttp import WSMsgType, web

from servers.contract import ROUTE_WEBSOCKET, WS_SUBPROTOCOL


async def echo(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(protocols=(WS_SUBPROTOCOL,))
    await ws.prepare(request)
    async for message in ws:
        if message.type == WSMsgType.TEXT:
            await ws.send_str(message.data)
        elif message.type == WSMsgType.BINARY:
            await ws.send_bytes(message.data)
    return ws


def run(host: str, port: int) -> None:
    app = web.Application()
    app.router.add_get(ROUTE_WEBSOCKET, echo)
    web.run_app(app, host=host, port=port, access_log=None, print=None)


def serve(listener: socket.socket) -> None:
    """Serve on `listener`, one of a parent's SO_REUSEPORT sockets
    (`python -m servers.minimal NAME --ws --workers N`)."""
    app = web.Application()
    app.router.add_get(ROUTE_WEBSOCKET, echo)
    web.run_app(app, sock=listener, access_log=None, print=None)
