"""The wire contract as one WSGI application on green blocking sockets (gevent, eventlet).

Both frameworks run WSGI over monkey-patched, cooperatively scheduled blocking sockets, so
the routing and every route are written once for them. A framework module supplies only
what its server makes different (servers.runtimes.green.interfaces.GreenConnection): how
the application reaches a request's headers as sent and its connection's slow-client
deadlines (servers.runtimes.green.deadlines: the framework keeps the head's, the
application the body's), and how it takes the connection over after a WebSocket upgrade.

Where each part lives:
- servers.runtimes.green.routes: `/`, `/counter`, `/log` and the backend routes;
- servers.runtimes.green.workloads: the boards' workload routes;
- servers.runtimes.green.upgrade: the `/ws` handshake and the takeover of the connection;
- servers.runtimes.green.websocket: the WebSocket session (wsproto over the green socket);
- servers.runtimes.green.replies: the headers and error answers every route shares;
- this module: the route tables, the dispatch every request goes through, and the tick
  and telemetry loops.

Import this only after the framework has monkey-patched the standard library: the
`threading.Lock` and `time.monotonic` used here are then the green ones.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from servers import contract
from servers.core.framing import framing_error
from servers.core.state import ServerState
from servers.runtimes.green.backends import GreenBackends
from servers.runtimes.green.interfaces import (
    Environ,
    GreenConnection,
    Handler,
    Headers,
    Routes,
    Sink,
    StartResponse,
)
from servers.runtimes.green.replies import DatedHeaders, Replies, server_software
from servers.runtimes.green.routes import backend_routes, drain_body, log_route, text_routes
from servers.runtimes.green.upgrade import release_buffers, websocket_handshake, websocket_route
from servers.runtimes.green.websocket import DeclaredSizeLimit, WebSocketSession
from servers.runtimes.green.workloads import workload_routes

# The names the framework modules, the WSGI contender and the tests import from here.
__all__ = [
    "DatedHeaders",
    "DeclaredSizeLimit",
    "Environ",
    "GreenApp",
    "GreenConnection",
    "Headers",
    "Sink",
    "StartResponse",
    "WebSocketSession",
    "release_buffers",
    "report_forever",
    "server_software",
    "tick_forever",
    "websocket_handshake",
]

# The routes that read their own request body; any other route's body is drained first.
_READS_OWN_BODY = (contract.ROUTE_LOG, contract.ROUTE_UPLOAD)


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
        replies = Replies(server_software, connection)
        routes = text_routes(state, replies)
        routes[contract.ROUTE_LOG] = {"*": log_route(state, sink, connection, replies)}
        routes[contract.ROUTE_WEBSOCKET] = {
            "GET": websocket_route(state, sink, connection, replies, self.websockets)
        }
        # Looked up only when no exact route matched: `/` pays nothing for them.
        prefix_routes = backend_routes(state, backends, replies)
        workload_exact, workload_prefixes = workload_routes(
            state, connection.deadlines, replies.headers, replies.plain, replies.refuse
        )
        routes |= workload_exact
        prefix_routes |= workload_prefixes
        self.wsgi = _dispatch(routes, prefix_routes, connection, replies)

    def close_websockets(self) -> None:
        """Server shutdown: send every open WebSocket a 1001 close (they end on the reply)."""
        for session in list(self.websockets):
            session.go_away()


def _dispatch(
    routes: Routes, prefix_routes: Routes, connection: GreenConnection, replies: Replies
) -> Handler:
    """The WSGI callable: framing checked, an unread body drained, then the handler of the
    path (exact, else the first matching prefix) and method; 404 and 405 otherwise."""
    plain = replies.plain
    refuse = replies.refuse
    allow = {
        path: [("Allow", ",".join(sorted(methods)))]
        for path, methods in [*routes.items(), *prefix_routes.items()]
    }

    def wsgi(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        # pywsgi and eventlet.wsgi frame bodies by rules a smuggler can exploit
        # ("xchunked", two Content-Lengths, "+3"): refuse before any body is read.
        if framing_error(connection.raw_headers(environ)) is not None:
            return refuse(environ, start_response, 400)
        path = environ["PATH_INFO"]
        if (
            environ.get("CONTENT_LENGTH") or "HTTP_TRANSFER_ENCODING" in environ
        ) and path not in _READS_OWN_BODY:  # /log and /upload read their own
            refusal = drain_body(environ, connection.deadlines(environ))
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
