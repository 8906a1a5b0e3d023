"""One module per framework: thin and idiomatic, differing only where the framework does.

A framework with more to say is a package split by concern (twisted: h1, h2, site, routes,
websocket; tornado: handlers, websocket, server; aiohttp: routes, websocket), its
`__init__` the module named here. The rules every server shares are written once in
servers.core (the WebSocket message rule, the body limit, the shutdown's budget, the
lingering close, ...): a framework module only calls them in its framework's idiom.

Each module is imported only by the server process that runs it (gevent and eventlet
monkey-patch at import) and offers one function, `serve(worker: Worker) -> None`:
serve HTTP on `worker.listener` (already listening; TCP_NODELAY inherited on accept) and
the memcached socket service on `worker.mc_listener` when given, until SIGTERM or SIGINT;
then stop accepting, close what is open within `contract.SHUTDOWN_GRACE_S`, flush the
sink, write a last telemetry line and return. `servers.FRAMEWORKS` names the module.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from servers.contract import ServerOptions
from servers.core.state import ServerState


@dataclass(frozen=True)
class Worker:
    """One worker process of `python -m servers NAME`: what its framework module serves."""

    options: ServerOptions
    listener: socket.socket  # HTTP
    state: ServerState
    mc_listener: socket.socket | None = None  # the memcached socket service, when asked for
