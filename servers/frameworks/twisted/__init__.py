"""The wire contract on twisted.web (epoll reactor), WebSockets through autobahn.

`twisted.web` serves HTTP from a `Resource` tree; `/ws` hands the connection to autobahn's
`WebSocketResource`, which takes the transport over from the HTTP channel. `/log` answers
from a Deferred once the sink stored its record (`servers.runtimes.twisted.sinks`: file writes and
MongoDB inserts on dedicated thread pools). `/gridfs` and `/mc` answer from Deferreds of
`servers.runtimes.twisted.backends` (GridFS on a thread pool, a pool of memcached protocols), which
also holds the memcached socket service (`--mc-socket-port`). `/files` streams the file with
twisted.web's own `NoRangeStaticProducer`. Importing this module installs no reactor:
`serve` installs the epoll reactor itself.

Protocols: the same Site and routes on each. h1-tls and h2 wrap the listener as
`listenSSL` does (servers.runtimes.twisted.tls), with ALPN offering only the case's
protocol. h2 and h2c are twisted.web's own HTTP/2, `H2Connection` (the `h2` package), the
channel twisted.web switches to when ALPN picks "h2": here each connection of an h2 or h2c
case starts as one (h2c is that protocol on a cleartext port: the client's preface comes
first, prior knowledge; twisted.web has no h2c upgrade). WebSockets stay HTTP/1.1's
(twisted.web has no RFC 8441 extended CONNECT).

Modules: `h1` (the HTTP/1.1 request and channel), `h2` (the HTTP/2 connection), `site` (the
Site every protocol serves), `routes` (the contract's Resources), `websocket` (autobahn's
protocol and factory), `replies` and `connections` (what those share); this one builds the
site and runs the reactor.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
from typing import Any

from twisted.internet.defer import Deferred, gatherResults, maybeDeferred
from twisted.internet.error import ReactorNotRunning
from twisted.logger import (
    FilteringLogObserver,
    LogLevel,
    LogLevelFilterPredicate,
    globalLogBeginner,
    textFileLogObserver,
)
from twisted.web.resource import Resource

from servers import contract
from servers.contract import ServerOptions
from servers.core import memcache
from servers.core.shutdown import CONNECTIONS_GRACE_S
from servers.core.sinks import mongo_url
from servers.core.state import ServerState, TelemetryTimers
from servers.frameworks import Worker
from servers.frameworks.twisted.routes import (
    CounterRoute,
    FilesRoute,
    GridFSRoute,
    LogRoute,
    MemcachedRoute,
    TextRoute,
    WebSocketRoute,
)
from servers.frameworks.twisted.site import ContractSite
from servers.frameworks.twisted.websocket import MessageFactory
from servers.runtimes.twisted.backends import (
    GridFSReader,
    MemcachedPool,
    MemcachedSocketServiceFactory,
)
from servers.runtimes.twisted.sinks import TwistedSink, open_twisted_sink
from servers.runtimes.twisted.tls import tls_factory
from servers.runtimes.twisted.workloads import add_workload_routes

_DRAIN_POLL_S = 0.010


def make_site(
    options: ServerOptions,
    state: ServerState,
    sink: TwistedSink,
    gridfs: GridFSReader,
    pool: MemcachedPool,
    reactor: Any,
) -> tuple[ContractSite, MessageFactory]:
    """The contract's routes; twisted.web answers unknown paths 404."""
    websockets = MessageFactory(state, sink, reactor)
    root = Resource()
    root.putChild(b"", TextRoute(state))
    root.putChild(_segment(contract.ROUTE_COUNTER), CounterRoute(state))
    root.putChild(_segment(contract.ROUTE_LOG), LogRoute(state, sink))
    root.putChild(_segment(contract.ROUTE_FILES_PREFIX), FilesRoute(state, options.files_dir))
    root.putChild(_segment(contract.ROUTE_GRIDFS_PREFIX), GridFSRoute(state, gridfs))
    root.putChild(_segment(contract.ROUTE_MEMCACHED_PREFIX), MemcachedRoute(state, pool))
    root.putChild(_segment(contract.ROUTE_WEBSOCKET), WebSocketRoute(state, websockets))
    add_workload_routes(root, state, reactor)
    site = ContractSite(
        root, state, options.head_timeout_s, options.body_timeout_s, options.protocol
    )
    return site, websockets


def _segment(route: str) -> bytes:
    """A route's first path segment: `/files/` → b"files"."""
    return route.strip("/").encode()


def _log_warnings_to_stderr() -> None:
    # Without an observer Twisted buffers every event and shows none; stdout is telemetry.
    observer = FilteringLogObserver(
        textFileLogObserver(sys.stderr),
        [LogLevelFilterPredicate(defaultLogLevel=LogLevel.warn)],
    )
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)


def serve(worker: Worker) -> None:
    """Serve `worker` (see servers.frameworks) on Twisted's epoll reactor."""
    options, listener, state = worker.options, worker.listener, worker.state
    mc_listener = worker.mc_listener
    from servers.runtimes.twisted.reactor import install_bounded_epoll_reactor

    install_bounded_epoll_reactor()  # the epoll reactor, a close storm taken in batches
    from twisted.internet import reactor

    _log_warnings_to_stderr()
    sink = open_twisted_sink(options, state, reactor)
    gridfs = GridFSReader(mongo_url(options), options.mongo_db, state, reactor)
    pool = MemcachedPool(memcache.memcached_address(options.memcached), state, reactor)
    site, websockets = make_site(options, state, sink, gridfs, pool, reactor)
    # h1-tls, h2: TLS around the site, as listenSSL serves one; h1, h2c: the site itself.
    http_factory = tls_factory(options, site) if options.tls else site
    ports = [_adopt(reactor, listener, http_factory)]
    socket_service: MemcachedSocketServiceFactory | None = None
    if mc_listener is not None:
        socket_service = MemcachedSocketServiceFactory(state, pool)
        ports.append(_adopt(reactor, mc_listener, socket_service))

    timers = TelemetryTimers(state, reactor.callLater)

    def drain() -> None:
        site.drain()
        if socket_service is not None:
            socket_service.drain()

    def close_backends(_: object) -> Deferred:
        pool.close()
        return gatherResults([sink.close(), gridfs.close()], consumeErrors=True)

    def shut_down() -> Deferred:
        """Runs on SIGTERM/SIGINT (reactor.stop), before the reactor drops connections."""
        stopped = gatherResults([maybeDeferred(port.stopListening) for port in ports])
        for protocol in list(websockets.open_protocols):
            protocol.going_away()
        drain()
        drained: Deferred = Deferred()
        deadline_s = reactor.seconds() + CONNECTIONS_GRACE_S

        def poll() -> None:
            if state.open <= 0 or reactor.seconds() >= deadline_s:
                drained.callback(None)
            else:
                drain()
                reactor.callLater(_DRAIN_POLL_S, poll)

        poll()
        # Whatever is still open after the deadline, the reactor closes next; the sink
        # writes what it was given, closes its file or client and stops its pool, and the
        # GridFS reader closes its client, within CLOSE_TIMEOUT_S (2 s): 2.5 s + 2 s stays
        # inside the contract's 5 s.
        done = gatherResults([stopped, drained])
        return done.addBoth(close_backends)

    def stop() -> None:
        with contextlib.suppress(ReactorNotRunning):  # a second signal while shutting down
            reactor.stop()

    def on_signal(signum: int, frame: object) -> None:
        reactor.callFromThread(stop)  # wakes the reactor from epoll_wait

    # Our own handlers: the reactor leaves SIGINT alone when it was ignored at start
    # (a background job of a shell), and the contract says SIGINT stops the server too.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    reactor.callWhenRunning(timers.start)
    reactor.addSystemEventTrigger("before", "shutdown", shut_down)
    reactor.run(installSignalHandlers=False)
    state.emit_telemetry()


def _adopt(reactor: Any, listener: socket.socket, factory: Any) -> Any:
    """Accept on a socket `__main__` opened (TCP_NODELAY set there, inherited on accept)."""
    listener.setblocking(False)  # Twisted accepts in a loop until EAGAIN
    port = reactor.adoptStreamPort(listener.fileno(), listener.family, factory)
    listener.close()  # the reactor holds its own duplicate of the descriptor
    return port
