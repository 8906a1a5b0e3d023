"""The wire contract on aiohttp.web (asyncio or uvloop).

The backends (`/gridfs`, `/mc`, the memcached socket service) are
servers/runtimes/asyncio/backends.py, shared with tornado; `/files` is aiohttp's own
FileResponse.

TLS (h1-tls) is aiohttp's `ssl_context` on the site; aiohttp.web speaks HTTP/1.1 only.

Modules: `routes` (the HTTP handlers), `websocket` (`/ws`); this one builds the application
and serves it.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from aiohttp import web

from servers import contract
from servers.contract import ServerOptions
from servers.core.shutdown import CONNECTIONS_GRACE_S
from servers.core.state import ServerState, TelemetryTimers
from servers.core.tls import server_context
from servers.frameworks import Worker
from servers.frameworks.aiohttp.routes import HttpRoutes, closed, too_large
from servers.frameworks.aiohttp.websocket import WebSocketRoute
from servers.runtimes.asyncio.aiohttp_workloads import add_workload_routes
from servers.runtimes.asyncio.backends import AsyncBackends
from servers.runtimes.asyncio.loop import run_on_asyncio, until_stopped
from servers.runtimes.asyncio.sinks import AsyncSink, open_async_sink


def make_app(
    state: ServerState, sink: AsyncSink, backends: AsyncBackends, body_timeout_s: float
) -> web.Application:
    """The contract's routes; aiohttp answers unknown paths 404 and wrong methods 405."""
    routes = HttpRoutes(state, sink, backends, body_timeout_s)
    websocket = WebSocketRoute(state, sink)
    app = web.Application(client_max_size=contract.LOG_MAX_BODY_BYTES)
    app.router.add_get(contract.ROUTE_TEXT, routes.text)
    app.router.add_get(contract.ROUTE_COUNTER, routes.counter)
    app.router.add_route("*", contract.ROUTE_LOG, routes.log)
    # Everything after the prefix, slashes and all, so "/files/" and "/files//abs" reach
    # the handler and get the contract's 404 (static.valid_name refuses them).
    app.router.add_get(contract.ROUTE_FILES_PREFIX + "{name:.*}", routes.files)
    app.router.add_get(contract.ROUTE_GRIDFS_PREFIX + "{name:.*}", routes.gridfs)
    app.router.add_get(contract.ROUTE_MEMCACHED_PREFIX + "{key:.*}", routes.mc)
    app.router.add_get(contract.ROUTE_WEBSOCKET, websocket.handle)
    add_workload_routes(app, state, body_timeout_s, too_large, closed)
    app.on_shutdown.append(websocket.close_all)
    return app


class _TLSSockSite(web.SockSite):
    """aiohttp's SockSite with TLS (`ssl_context`), the handshake held to the head deadline.

    SockSite leaves asyncio's handshake timeout at its default (60 s), and aiohttp meets a
    connection only once its handshake is done (`connection_made`), so a client stopping
    mid-handshake would outlive the contract's head deadline by far. This start is
    SockSite's with the loop's `ssl_handshake_timeout` set.
    """

    def __init__(
        self, runner: web.AppRunner, sock: Any, context: ssl.SSLContext, handshake_timeout_s: float
    ) -> None:
        super().__init__(runner, sock, ssl_context=context)
        self._handshake_timeout_s = handshake_timeout_s

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            server,
            sock=self._sock,
            ssl=self._ssl_context,
            backlog=self._backlog,
            ssl_handshake_timeout=self._handshake_timeout_s,
        )


def _site(runner: web.AppRunner, listener: Any, options: ServerOptions) -> web.SockSite:
    """Where the runner serves: the listener, cleartext (h1) or over TLS (h1-tls)."""
    if not options.tls:
        return web.SockSite(runner, listener)
    return _TLSSockSite(runner, listener, server_context(options), options.head_timeout_s)


async def _serve(worker: Worker) -> None:
    options, listener, state = worker.options, worker.listener, worker.state
    mc_listener = worker.mc_listener
    loop = asyncio.get_running_loop()
    sink = open_async_sink(options, state)
    backends = AsyncBackends(options, state)
    head_timeout_s = options.head_timeout_s
    runner = web.AppRunner(
        make_app(state, sink, backends, options.body_timeout_s),
        handle_signals=False,
        access_log=None,
        shutdown_timeout=CONNECTIONS_GRACE_S,
        # The head deadline after a response: aiohttp closes a connection still waiting
        # for a whole head this long after its last response; received bytes do not
        # move it, so it is a deadline and not an idle timer.
        keepalive_timeout=head_timeout_s,
        # A body no handler reads (a GET's) is read and dropped after the response for
        # at most this long, then the connection closed: the body deadline there.
        lingering_time=options.body_timeout_s,
    )
    await runner.setup()
    server = runner.server
    assert server is not None
    made, lost = server.connection_made, server.connection_lost
    # The head deadline of a new connection: aiohttp arms its keep-alive timer at
    # connection open only from 3.14.4 on, so this timer stands in for it before that.
    first_head_timers: dict[Any, asyncio.TimerHandle] = {}

    def close_if_no_head(handler: Any, transport: asyncio.Transport) -> None:
        del first_head_timers[handler]
        # RequestHandler._request_count (private; aiohttp 3.9 to 3.14.5): the request
        # heads it has parsed on this connection.
        if handler._request_count == 0:
            transport.close()

    def connection_made(handler, transport) -> None:
        state.connection_opened()
        made(handler, transport)
        first_head_timers[handler] = loop.call_later(
            head_timeout_s, close_if_no_head, handler, transport
        )

    def connection_lost(handler, exc) -> None:
        state.connection_closed()
        timer = first_head_timers.pop(handler, None)
        if timer is not None:  # the handler is freed now, not when the timer is due
            timer.cancel()
        lost(handler, exc)

    server.connection_made = connection_made  # type: ignore[method-assign]
    server.connection_lost = connection_lost  # type: ignore[method-assign]
    await _site(runner, listener, options).start()
    if mc_listener is not None:
        await backends.start_socket_service(mc_listener)

    timers = TelemetryTimers(state, loop.call_later)
    timers.start()
    await until_stopped()
    backends.stop_accepting()
    await runner.cleanup()
    await backends.aclose()
    await sink.aclose()
    timers.stop()
    state.emit_telemetry()


def serve(worker: Worker) -> None:
    """Serve `worker` (see servers.frameworks) on aiohttp's web runner, on asyncio or uvloop."""
    run_on_asyncio(worker.options.loop, _serve(worker))
