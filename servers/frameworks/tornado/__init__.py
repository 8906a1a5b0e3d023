"""The wire contract on tornado.web (asyncio or uvloop).

TLS (h1-tls) is tornado's own: HTTPServer's `ssl_options` is the SSLContext of
servers.core.tls. Tornado speaks HTTP/1.1 only (no HTTP/2 in tornado.httpserver).

The backends (`/gridfs`, `/mc`, the memcached socket service) are
servers/runtimes/asyncio/backends.py, shared with aiohttp; `/files` reads the file as
tornado's StaticFileHandler does.

Modules: `handlers` (the HTTP routes), `websocket` (`/ws`), `server` (the counting
HTTPServer and its refusing streams); this one builds the application and serves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import tornado.web

from servers import contract
from servers.core.shutdown import CONNECTIONS_GRACE_S, WS_SHUTDOWN_REASON
from servers.core.state import ServerState, TelemetryTimers
from servers.core.tls import server_context
from servers.frameworks import Worker
from servers.frameworks.tornado.handlers import (
    CounterHandler,
    FilesHandler,
    GridFSHandler,
    LogHandler,
    MemcachedHandler,
    TextHandler,
)
from servers.frameworks.tornado.server import CountingHTTPServer
from servers.frameworks.tornado.websocket import WebSocket
from servers.runtimes.asyncio.backends import AsyncBackends
from servers.runtimes.asyncio.loop import run_on_asyncio, until_stopped
from servers.runtimes.asyncio.sinks import open_async_sink
from servers.runtimes.asyncio.tornado_workloads import workload_handlers


class _NoHandshakeWarnings(logging.Filter):
    """Drops tornado's warning for each failed TLS handshake (a scanner, a plaintext
    request on the TLS port): it logs a malformed cleartext request at info level, below
    stderr's, and a failed handshake is the same kind of client error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("SSL Error on")


def _no_access_log(handler: tornado.web.RequestHandler) -> None:
    """Tornado formats a log line per request unless `log_function` replaces it."""


def make_app(
    state: ServerState, sink: Any, websockets: set[WebSocket], backends: AsyncBackends
) -> tornado.web.Application:
    """The contract's routes; tornado answers unknown paths 404 and wrong methods 405."""
    context = {"state": state, "sink": sink}
    backend_context = {**context, "backends": backends}
    return tornado.web.Application(
        [
            (contract.ROUTE_TEXT, TextHandler, context),
            (contract.ROUTE_COUNTER, CounterHandler, context),
            (contract.ROUTE_LOG, LogHandler, context),
            # Everything after the prefix: tornado neither normalises "..", nor decodes the
            # path before matching, so each name reaches the handler and its rules.
            (contract.ROUTE_FILES_PREFIX + "(.*)", FilesHandler, backend_context),
            (contract.ROUTE_GRIDFS_PREFIX + "(.*)", GridFSHandler, backend_context),
            (contract.ROUTE_MEMCACHED_PREFIX + "(.*)", MemcachedHandler, backend_context),
            (contract.ROUTE_WEBSOCKET, WebSocket, {**context, "websockets": websockets}),
            *workload_handlers(context),
        ],
        log_function=_no_access_log,
        websocket_max_message_size=contract.WS_MAX_MESSAGE_BYTES,
    )


async def _serve(worker: Worker) -> None:
    options, listener, state = worker.options, worker.listener, worker.state
    mc_listener = worker.mc_listener
    loop = asyncio.get_running_loop()
    sink = open_async_sink(options, state)
    backends = AsyncBackends(options, state)
    websockets: set[WebSocket] = set()
    server = CountingHTTPServer(
        make_app(state, sink, websockets, backends),
        state=state,
        # The contract's slow-client deadlines (docs/contract.md, "Slow clients"), both
        # deadlines in tornado too: the next head is due this long after the previous
        # response was written (or the connection opened), a body this long after its
        # head. A WebSocket detaches the stream from both.
        idle_connection_timeout=options.head_timeout_s,
        body_timeout=options.body_timeout_s,
        # h1-tls: tornado wraps each accepted socket and runs the handshake on its stream,
        # before the first head, within the head deadline. None: cleartext, as always.
        ssl_options=server_context(options) if options.tls else None,
    )
    if options.tls:
        logging.getLogger("tornado.general").addFilter(_NoHandshakeWarnings())
    listener.setblocking(False)  # tornado accepts in a loop until EWOULDBLOCK
    server.add_sockets([listener])
    if mc_listener is not None:
        await backends.start_socket_service(mc_listener)

    # The asyncio loop's own timers (not tornado's IOLoop wrappers or PeriodicCallback,
    # which skips late runs): the same probe as on aiohttp.
    timers = TelemetryTimers(state, loop.call_later)
    timers.start()
    await until_stopped()

    server.stop()  # stop accepting
    backends.stop_accepting()
    closed = [ws.closed_future for ws in websockets if ws.closed_future is not None]
    for ws in list(websockets):
        ws.close(contract.WS_CLOSE_GOING_AWAY, WS_SHUTDOWN_REASON)
    if closed:
        await asyncio.wait(closed, timeout=CONNECTIONS_GRACE_S)
    # Past the grace the process exits anyway and the kernel closes what is left.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(server.close_all_connections(), timeout=CONNECTIONS_GRACE_S)
    timers.stop()
    await backends.aclose()
    await sink.aclose()
    state.emit_telemetry()


def serve(worker: Worker) -> None:
    """Serve `worker` (see servers.frameworks) on tornado's HTTPServer, on asyncio or uvloop."""
    run_on_asyncio(worker.options.loop, _serve(worker))
