"""Backends on green threads (gevent, eventlet): files, GridFS, memcached and its socket service.

One implementation serves both frameworks, in blocking code that blocks one green thread
only; a `GreenRuntime` (servers.runtimes.green.sinks) supplies the framework's primitives. What is
left to each framework module is how the socket service accepts connections (gevent's
`StreamServer`, eventlet's accept loop); the protocol spoken on each connection is here.

- Files: `static.file_path`, then a plain `read()`. The files are ≤ 64 KiB and sit in the
  page cache, so the read blocks the hub for microseconds; neither pywsgi nor
  eventlet.wsgi offers sendfile, and a hop to a real thread would cost more than the read.
- GridFS: pymongo's `gridfs.GridFSBucket` on monkey-patched (green) sockets, as the mongo
  sink uses its client: the standard read (servers.core.gridfs_layout).
- memcached: a FIFO queue holding `contract.MC_POOL_SIZE` tokens, each an open socket or
  None (a slot that may open one). Taking a token is the only wait, so at most 50 sockets
  are ever open. FIFO rotates through every token, so the first 50 gets open the 50
  connections and every later one reuses them: the set of connections is fixed after
  warm-up whatever the load does (a LIFO queue would open more whenever concurrency rose
  above what it had seen). A socket that fails is closed and its token goes back as None:
  a later request connects afresh.
- The memcached socket service: one blocking loop per connection around the core's
  `SocketServiceSession`; the framework accepts.

Import this module only after monkey-patching: its `socket` and pymongo are then green.
"""

from __future__ import annotations

import contextlib
import socket
import sys
from typing import Any, Protocol

from servers import contract
from servers.contract import ServerOptions
from servers.core import gridfs_layout, memcache, static
from servers.core.backends import BackendUnavailable, StoredFile
from servers.core.sinks import MONGO_SERVER_SELECTION_TIMEOUT_MS, mongo_url
from servers.core.state import ServerState
from servers.runtimes.green.sinks import GreenRuntime

MC_READ_BYTES = 64 * 1024
SOCKET_SERVICE_READ_BYTES = 64 * 1024
CLOSE_TIMEOUT_S = 1.0  # shutdown waits this long for the GridFS client to close


class GreenQueue(Protocol):
    """A green FIFO queue (`gevent.queue.Queue`, `eventlet.queue.Queue`)."""

    def get(self, block: bool = True, timeout: float | None = None) -> Any: ...

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None: ...

    def qsize(self) -> int: ...


def read_file(found: static.StaticFile) -> bytes:
    """The file's bytes: a plain blocking read (small, page-cached files; see the docstring)."""
    with open(found.path, "rb") as file:
        return file.read()


class GreenMemcachedPool:
    """`contract.MC_POOL_SIZE` persistent connections to memcached, opened lazily."""

    def __init__(self, address: tuple[str, int], state: ServerState, queue: GreenQueue) -> None:
        self._address = address
        self._state = state
        self._tokens = queue
        for _ in range(contract.MC_POOL_SIZE):
            self._tokens.put(None)

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self._address, timeout=contract.MC_TIMEOUT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def get(self, key: bytes) -> bytes | None:
        """memcached's value for a valid `key`, None on a miss; BackendUnavailable on failure.

        Blocks the calling green thread while it waits for a connection and for the reply.
        """
        sock: socket.socket | None = self._tokens.get()
        try:
            if sock is None:
                sock = self._connect()
            sock.sendall(memcache.get_request(key))
            buffer = sock.recv(MC_READ_BYTES)
            while True:
                if not buffer:
                    raise memcache.MemcacheError("memcached closed the connection")
                reply = memcache.parse_get_reply(buffer)
                if reply is not None:
                    break
                more = sock.recv(MC_READ_BYTES)
                if not more:
                    raise memcache.MemcacheError("memcached closed the connection")
                buffer += more
        except (OSError, memcache.MemcacheError) as error:
            self._drop(sock)
            self._state.backend_errors += 1
            raise BackendUnavailable(f"memcached: {error}") from error
        except BaseException:  # killed at shutdown: never lose the token
            self._drop(sock)
            raise
        value, used = reply
        if used == len(buffer):
            self._tokens.put(sock)
        else:  # bytes after the reply: out of step with memcached, do not reuse
            self._drop(sock)
        return value

    def _drop(self, sock: socket.socket | None) -> None:
        if sock is not None:
            sock.close()
        self._tokens.put(None)

    def close(self) -> None:
        """Close the idle connections (shutdown; a request in flight keeps its own)."""
        for _ in range(self._tokens.qsize()):
            sock = self._tokens.get()
            if sock is not None:
                sock.close()


class GreenGridFS:
    """Files from GridFS through pymongo's `gridfs.GridFSBucket` on green sockets: the
    standard read (`fs.files` by filename, `fs.chunks` by `files_id` sorted by `n`)
    blocks the request's green thread only."""

    def __init__(self, url: str, database: str, state: ServerState, runtime: GreenRuntime) -> None:
        from gridfs import GridFSBucket
        from pymongo import MongoClient
        from pymongo.errors import PyMongoError

        self._state = state
        self._runtime = runtime
        self._errors = (PyMongoError, *gridfs_layout.MALFORMED_ERRORS)
        # connect=False: no I/O and no monitor threads until the first /gridfs request, so
        # a server that never reads GridFS pays nothing and starts with the database down.
        self._client: Any = MongoClient(
            url, serverSelectionTimeoutMS=MONGO_SERVER_SELECTION_TIMEOUT_MS, connect=False
        )
        self._bucket = GridFSBucket(self._client[database], contract.GRIDFS_BUCKET)

    def read(self, name: str) -> StoredFile | None:
        """The file `name` (a `static.valid_name`), None when GridFS has none.

        Raises BackendUnavailable on a database error or a corrupt file.
        """
        try:
            return gridfs_layout.read_sync(self._bucket, name)
        except self._errors as error:
            self._state.backend_errors += 1
            raise BackendUnavailable(f"gridfs: {error}") from error

    def close(self) -> None:
        """Close the client, bounded: `close()` may talk to the server (endSessions)."""
        closed = self._runtime.event()

        def close_client() -> None:
            try:
                self._client.close()
            except Exception as error:  # shutting down: say so, do not fail the exit
                print(f"servers: closing the GridFS client failed: {error!r}", file=sys.stderr)
            finally:
                closed.set()

        self._runtime.spawn(close_client)
        closed.wait(CLOSE_TIMEOUT_S)


class GreenBackends:
    """Everything the backend routes and the socket service read from, for one process."""

    def __init__(self, options: ServerOptions, state: ServerState, runtime: GreenRuntime) -> None:
        self.files_dir = options.files_dir
        self.memcached = GreenMemcachedPool(
            memcache.memcached_address(options.memcached), state, runtime.queue()
        )
        self.gridfs = GreenGridFS(mongo_url(options), options.mongo_db, state, runtime)

    def close(self) -> None:
        """Shutdown: close the pool's idle connections and the GridFS client."""
        self.memcached.close()
        self.gridfs.close()


class MemcachedSocketService:
    """The memcached socket service on green threads: one blocking loop per connection.

    The framework accepts and runs `serve_connection(sock)` in a green thread of its own.
    The session (servers.core.memcache) keeps the contract's order and one get in flight;
    the answers to every line one read brought are sent together.
    """

    def __init__(self, pool: GreenMemcachedPool, state: ServerState) -> None:
        self._pool = pool
        self._state = state
        self._sockets: set[socket.socket] = set()

    def serve_connection(self, sock: socket.socket) -> None:
        """Serve one accepted connection until quit, EOF, an error or shutdown."""
        state = self._state
        state.connection_opened()
        self._sockets.add(sock)
        try:
            with contextlib.suppress(OSError):  # reset, broken pipe, shut down: gone
                self._serve(sock)
        finally:
            self._sockets.discard(sock)
            state.connection_closed()
            sock.close()

    def _serve(self, sock: socket.socket) -> None:
        pool = self._pool
        session = memcache.SocketServiceSession(self._state)
        while True:
            data = sock.recv(SOCKET_SERVICE_READ_BYTES)
            if not data:
                return
            key = session.receive(data)
            while key is not None:
                try:
                    value = pool.get(key)  # blocks this green thread only
                except BackendUnavailable:
                    key = session.failed()
                else:
                    key = session.answered(value)
            answers = session.output()
            if answers:
                sock.sendall(answers)
            if session.closing:
                return

    def close_connections(self) -> None:
        """Shutdown: shut every connection down; a blocked read sees EOF and its loop ends."""
        for sock in list(self._sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
