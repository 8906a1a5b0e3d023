"""Backends on Twisted: GridFS, the memcached pool and the memcached socket service.

Everything here runs on the reactor thread except pymongo's calls, which run on a thread
pool (the same `start_pool` machinery as the mongo sink in servers.runtimes.twisted.sinks).

- memcached: `MemcachedPool` keeps at most `contract.MC_POOL_SIZE` `MemcachedConnection`
  protocols, opened lazily through a TCP endpoint (connect timeout 2 s), handed out LIFO
  (so only as many stay open as the peak concurrency needed) and reused; a get that finds
  all 50 busy waits in a FIFO of Deferreds. A connection that fails (refused, reset, a
  reply it cannot parse, no reply within 2 s) is aborted and dropped; the next get that
  needs one opens a fresh connection.

  Why not `twisted.protocols.memcache.MemCacheProtocol`: it is a LineReceiver (a method
  call and a bytes copy per reply line), its own 60 s idle timeout disconnects a pooled
  connection that has nothing in flight, it has no pool, and the contract parses replies
  with `memcache.parse_get_reply` on every server so they are judged identically. A
  one-get-at-a-time Protocol around that parser is shorter than adapting it.
  Reply timeouts are swept four times a second instead of one `callLater` per get: the hot
  path only stores a timestamp.
- GridFS: pymongo's `gridfs.GridFSBucket` (the standard read, servers.core.gridfs_layout)
  on a pool of `MONGO_THREADS` threads, as the mongo sink inserts.
- The memcached socket service: `MemcachedSocketServiceFactory` /
  `MemcachedSocketServiceProtocol`, adopted by `serve` on the listening socket `__main__`
  opened; each connection runs the core's `SocketServiceSession` (the contract's order,
  one get in flight).

Every backend failure is counted once in `state.backend_errors`, here, and reaches the
caller as `BackendUnavailable` (HTTP 503, `memcache.REPLY_UNAVAILABLE` on the socket).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure

from servers import contract
from servers.core import gridfs_layout, memcache
from servers.core.backends import BackendUnavailable, StoredFile
from servers.core.sinks import CLOSE_TIMEOUT_S, MONGO_SERVER_SELECTION_TIMEOUT_MS
from servers.core.state import ServerState
from servers.runtimes.twisted.sinks import MONGO_THREADS, SELECTION_TIMEOUT_S, start_pool

_MC_SWEEP_INTERVAL_S = 0.25  # how often replies overdue by contract.MC_TIMEOUT_S are looked for
# A socket-service client that pipelines more than this while a get is in flight is paused.
_SOCKET_SERVICE_PAUSE_BYTES = 64 * 1024

_log = Logger()


# -- memcached pool -------------------------------------------------------------------------
class MemcachedConnection(Protocol):
    """One persistent connection to memcached, carrying one `get` at a time."""

    transport: Any

    def __init__(self, pool: MemcachedPool) -> None:
        self.pool = pool
        self.waiting: Deferred[bytes | None] | None = None  # the get in flight
        self.sent_at = 0.0  # time.monotonic() when it was sent
        self._buffer: bytearray | None = None  # a reply that arrived in pieces
        self._error: str | None = None

    def connectionMade(self) -> None:
        self.transport.setTcpNoDelay(True)

    def send(self, key: bytes, waiting: Deferred[bytes | None]) -> None:
        """Ask for `key`; `waiting` fires with the value (None on a miss)."""
        self.waiting = waiting
        self.sent_at = time.monotonic()
        self.transport.write(memcache.get_request(key))

    def dataReceived(self, data: bytes) -> None:
        waiting = self.waiting
        if waiting is None:
            self.abort("bytes nobody asked for")
            return
        buffer = self._buffer
        if buffer is not None:
            buffer += data
        try:
            reply = memcache.parse_get_reply(data if buffer is None else buffer)
        except memcache.MemcacheError as error:
            self.abort(str(error))
            return
        if reply is None:  # more to come (rare: a 100-byte value arrives whole)
            if buffer is None:
                self._buffer = bytearray(data)
            return
        value, used = reply
        if used != (len(data) if buffer is None else len(buffer)):
            self.abort("bytes after the reply")  # out of step with memcached
            return
        self._buffer = None
        self.waiting = None
        self.pool.release(self)  # first: the next queued get goes out before this answer
        waiting.callback(value)

    def abort(self, error: str) -> None:
        """Drop this connection; its get in flight (if any) fails with `error`."""
        if self._error is None:
            self._error = error
        self.pool.forget_idle(self)
        self.transport.abortConnection()  # connectionLost follows on the next turn

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        waiting, self.waiting = self.waiting, None
        self.pool.lost(self, waiting, self._error or reason.getErrorMessage())


class MemcachedPool:
    """At most `size` persistent connections to memcached; gets queue when all are busy.

    `get` returns a Deferred firing with the value or None (a miss), or failing with
    `BackendUnavailable`. Reactor thread only.
    """

    def __init__(
        self,
        address: tuple[str, int],
        state: ServerState,
        reactor: Any,
        size: int = contract.MC_POOL_SIZE,
    ) -> None:
        self._state = state
        self._reactor = reactor
        self._size = size
        host, port = address
        self._endpoint = TCP4ClientEndpoint(reactor, host, port, timeout=contract.MC_TIMEOUT_S)
        self._idle: list[MemcachedConnection] = []  # LIFO: the warmest connection first
        self._connected: set[MemcachedConnection] = set()
        self._count = 0  # connecting + connected: never above size
        self._queued: deque[tuple[bytes, Deferred[bytes | None]]] = deque()
        self._sweep = LoopingCall(self._expire)
        self._sweep.clock = reactor
        self._closed = False

    def get(self, key: bytes) -> Deferred[bytes | None]:
        """memcached's value for a valid `key` (None on a miss)."""
        waiting: Deferred[bytes | None] = Deferred()
        if self._idle:
            self._idle.pop().send(key, waiting)
        elif self._closed:
            return fail(BackendUnavailable("memcached pool closed (shutdown)"))
        elif self._count < self._size:
            self._connect(key, waiting)
        else:
            self._queued.append((key, waiting))
        return waiting

    def _connect(self, key: bytes, waiting: Deferred[bytes | None]) -> None:
        self._count += 1
        if not self._sweep.running:
            self._sweep.start(_MC_SWEEP_INTERVAL_S, now=False)
        connecting = connectProtocol(self._endpoint, MemcachedConnection(self))
        connecting.addCallbacks(
            self._opened, self._not_opened, callbackArgs=(key, waiting), errbackArgs=(waiting,)
        )

    def _opened(
        self, connection: MemcachedConnection, key: bytes, waiting: Deferred[bytes | None]
    ) -> None:
        self._connected.add(connection)
        connection.send(key, waiting)
        self._fill()

    def _fill(self) -> None:
        """memcached accepts connections: open the rest of the pool now (the memcached-proxy
        study's fixed 50), so a later, larger burst finds them ready instead of opening more."""
        while not self._closed and self._count < self._size:
            self._count += 1
            connecting = connectProtocol(self._endpoint, MemcachedConnection(self))
            connecting.addCallbacks(self._filled, self._fill_failed)

    def _filled(self, connection: MemcachedConnection) -> None:
        self._connected.add(connection)
        self.release(connection)

    def _fill_failed(self, failure: Failure) -> None:
        self._count -= 1  # no get waits on it: a later get connects on demand

    def _not_opened(self, failure: Failure, waiting: Deferred[bytes | None]) -> None:
        self._count -= 1
        self._fail(waiting, f"cannot connect: {failure.getErrorMessage()}")
        self._serve_queue()

    def release(self, connection: MemcachedConnection) -> None:
        """`connection` answered: give it the oldest queued get, or keep it idle."""
        if self._queued:
            key, waiting = self._queued.popleft()
            connection.send(key, waiting)
        else:
            self._idle.append(connection)

    def forget_idle(self, connection: MemcachedConnection) -> None:
        """`connection` is being aborted: no get may take it meanwhile."""
        if connection.waiting is None and connection in self._idle:
            self._idle.remove(connection)

    def lost(
        self, connection: MemcachedConnection, waiting: Deferred[bytes | None] | None, why: str
    ) -> None:
        """`connection` is gone (by memcached, an abort or shutdown): drop it."""
        self._connected.discard(connection)
        if connection in self._idle:  # memcached closed an idle connection
            self._idle.remove(connection)
        self._count -= 1
        if waiting is not None:
            self._fail(waiting, why)
        self._serve_queue()

    def _serve_queue(self) -> None:
        """A slot is free: open a connection for the oldest queued get."""
        if self._queued and not self._closed and self._count < self._size:
            key, waiting = self._queued.popleft()
            self._connect(key, waiting)

    def _fail(self, waiting: Deferred[bytes | None], why: str) -> None:
        self._state.backend_errors += 1
        waiting.errback(BackendUnavailable(f"memcached: {why}"))

    def _expire(self) -> None:
        overdue_at = time.monotonic() - contract.MC_TIMEOUT_S
        for connection in list(self._connected):
            if connection.waiting is not None and connection.sent_at < overdue_at:
                connection.abort(f"no reply within {contract.MC_TIMEOUT_S:g} s")

    def close(self) -> None:
        """Shutdown: close every connection; queued and later gets fail."""
        self._closed = True
        if self._sweep.running:
            self._sweep.stop()
        queued, self._queued = self._queued, deque()
        for _, waiting in queued:
            waiting.errback(BackendUnavailable("memcached pool closed (shutdown)"))
        for connection in list(self._connected):
            connection.transport.loseConnection()


class GridFSReader:
    """Files from GridFS with pymongo's `gridfs.GridFSBucket` (the standard read,
    servers.core.gridfs_layout), its blocking calls on a thread pool.

    The client is made with `connect=False` (no I/O, no monitor threads) and the pool is
    started on the first read, so a server that never reads GridFS pays nothing and starts
    with the database down. As in the mongo sink, while the last read found the database
    unreachable a read that already waited a selection timeout in the queue fails at once
    rather than waiting for a thread and a timeout of its own.
    """

    def __init__(self, url: str, database: str, state: ServerState, reactor: Any) -> None:
        from gridfs import GridFSBucket
        from pymongo import MongoClient

        self._state = state
        self._reactor = reactor
        self._client: Any = MongoClient(
            url, serverSelectionTimeoutMS=MONGO_SERVER_SELECTION_TIMEOUT_MS, connect=False
        )
        self._bucket = GridFSBucket(self._client[database], contract.GRIDFS_BUCKET)
        self._pool: Any = None  # started by the first read
        self._unreachable = False  # the last read could not reach the database

    def read(self, name: str) -> Deferred[StoredFile | None]:
        """The file `name` (a `static.valid_name`), or None when GridFS has none."""
        if self._pool is None:
            self._pool = start_pool(MONGO_THREADS, "gridfs")
        reading = deferToThreadPool(
            self._reactor, self._pool, self._read_blocking, name, time.monotonic()
        )
        return reading.addErrback(self._failed)

    def _read_blocking(self, name: str, queued_at: float) -> StoredFile | None:
        """`gridfs_layout.read_sync` (on a pool thread)."""
        from pymongo.errors import ConnectionFailure, ServerSelectionTimeoutError

        if self._unreachable and time.monotonic() - queued_at >= SELECTION_TIMEOUT_S:
            raise ServerSelectionTimeoutError("the database is unreachable (queued too long)")
        try:
            found = gridfs_layout.read_sync(self._bucket, name)
        except ConnectionFailure:
            self._unreachable = True
            raise
        self._unreachable = False
        return found

    def _failed(self, failure: Failure) -> Failure:
        from pymongo.errors import PyMongoError

        if failure.check(PyMongoError, *gridfs_layout.MALFORMED_ERRORS):
            self._state.backend_errors += 1
            return Failure(BackendUnavailable(f"GridFS: {failure.getErrorMessage()}"))
        return failure  # not the database (a bug): answered 500

    def close(self) -> Deferred[None]:
        """Close the client on the pool, then stop the pool: within CLOSE_TIMEOUT_S."""
        if self._pool is None:
            return succeed(None)
        closing = deferToThreadPool(self._reactor, self._pool, self._client.close)
        closing.addTimeout(CLOSE_TIMEOUT_S, self._reactor)
        return closing.addBoth(self._stop_pool)

    def _stop_pool(self, result: object) -> None:
        if isinstance(result, Failure):  # timed out: the pool's threads are daemons
            _log.warn("GridFS client not closed within {s} s: {f}", s=CLOSE_TIMEOUT_S, f=result)
            return
        self._pool.stop()  # idle: the close ran after every read queued before it


# -- the memcached socket service -----------------------------------------------------------
class MemcachedSocketServiceProtocol(Protocol):
    """One client of the memcached socket service: the core's session on a transport."""

    factory: MemcachedSocketServiceFactory
    transport: Any

    def __init__(self) -> None:
        self._session: memcache.SocketServiceSession | None = None
        self._fetching = False  # inside _fetch: an answer that comes at once must not recurse
        self._next_key: bytes | None = None  # what such an answer asked for next
        self._in_flight = False  # a get is with the pool
        self._paused = False
        self._closing = False

    def connectionMade(self) -> None:
        self._session = memcache.SocketServiceSession(self.factory.state)
        self.factory.state.connection_opened()
        self.factory.protocols.add(self)
        if self.factory.draining:
            self.close()

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self._closing = True
        self.factory.state.connection_closed()
        self.factory.protocols.discard(self)

    def dataReceived(self, data: bytes) -> None:
        if self._closing:
            return
        session = self._session
        assert session is not None
        key = session.receive(data)
        if key is not None:
            self._fetch(key)
        self._flush()
        busy = session.key is not None and not self._paused
        if busy and session.buffered_bytes > _SOCKET_SERVICE_PAUSE_BYTES:
            self._paused = True
            self.transport.pauseProducing()

    def _fetch(self, key: bytes) -> None:
        """Fetch `key`, and the keys later lines ask for as long as answers come at once."""
        self._fetching = True
        try:
            while True:
                self._next_key = None
                self._in_flight = True
                self.factory.pool.get(key).addCallbacks(self._got, self._failed)
                if self._next_key is None or self.factory.draining:
                    return  # memcached answers later, no line waits, or shutting down
                key = self._next_key
        finally:
            self._fetching = False

    def _got(self, value: bytes | None) -> None:
        self._in_flight = False
        assert self._session is not None
        self._answered(self._session.answered(value))

    def _failed(self, failure: Failure) -> None:
        if not failure.check(BackendUnavailable):  # a bug: logged, answered as a failure
            _log.failure("memcached socket service get failed", failure)
        self._in_flight = False
        assert self._session is not None
        self._answered(self._session.failed())

    def _answered(self, key: bytes | None) -> None:
        if self._fetching:
            self._next_key = key  # _fetch's loop asks for it
            return
        if self._closing:
            return
        if key is not None and not self.factory.draining:
            self._fetch(key)
        self._flush()

    def _flush(self) -> None:
        """Write the answers that are ready; close when the session or shutdown says so."""
        if self._closing:
            return
        session = self._session
        assert session is not None
        answers = session.output()
        if answers:
            self.transport.write(answers)
        if session.closing or (self.factory.draining and not self._in_flight):
            self.close()
        elif self._paused and session.key is None:
            self._paused = False
            self.transport.resumeProducing()

    def close(self) -> None:
        """Close after what was written; later lines are not read."""
        self._closing = True
        self.transport.loseConnection()

    def close_when_idle(self) -> None:
        """Shutdown: close now, or after the reply to the get in flight."""
        if not self._in_flight and not self._closing:
            self.close()


class MemcachedSocketServiceFactory(Factory):
    """The memcached socket service (`--mc-socket-port`): `get` through the shared pool."""

    protocol = MemcachedSocketServiceProtocol

    def __init__(self, state: ServerState, pool: MemcachedPool) -> None:
        self.state = state
        self.pool = pool
        self.protocols: set[MemcachedSocketServiceProtocol] = set()
        self.draining = False

    def drain(self) -> None:
        """Close idle connections; busy ones close after their reply."""
        self.draining = True
        for protocol in list(self.protocols):
            protocol.close_when_idle()
