"""uvicorn's httptools protocol, counting connections for `/counter` (`--http` takes a
protocol class): the ASGI app sees requests, never connections.

A connection upgraded to a WebSocket leaves this protocol without its `connection_lost`
(uvicorn hands the transport to its WebSocket protocol), so it is counted closed here at
the upgrade, and the app's `/ws` endpoint counts the WebSocket itself.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from servers.contenders.state import process_state
from servers.contract import ALPN_FOR_PROTOCOL, PROTOCOL_H1_TLS


class CountingHttpToolsProtocol(HttpToolsProtocol):
    # What uvicorn's TLS context offers by ALPN (it reads this off the protocol class):
    # the contract's h1-tls answers "http/1.1"; cleartext ignores it.
    alpn_protocols: ClassVar[list[str]] = [ALPN_FOR_PROTOCOL[PROTOCOL_H1_TLS]]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        process_state().connection_opened()
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        process_state().connection_closed()
        super().connection_lost(exc)

    def handle_websocket_upgrade(self) -> None:
        process_state().connection_closed()
        super().handle_websocket_upgrade()
