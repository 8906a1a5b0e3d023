"""Sinks on green threads (gevent, eventlet): blocking calls that block one green thread only.

One implementation serves both frameworks; a `GreenRuntime` supplies what differs (how to
spawn a green thread, a green event, how to run a function on a real OS thread).

- File: records gather in a `FileBatch`; ONE writer green thread hands each batch's
  `write()` to a real OS thread (the hub never blocks on the disk, and one write at a time
  keeps the lines in order). A `/log` request's green thread waits until the batch holding
  its record was written; WebSocket messages are written within `FLUSH_INTERVAL_S`.
- MongoDB: pymongo's synchronous `MongoClient` on monkey-patched (green) sockets and locks:
  each insert blocks the green thread that makes it. Measured under both gevent's
  `patch_all` and eventlet's `monkey_patch` against FerretDB: inserts and the
  serverSelectionTimeoutMS failure both work green (the 10 ms tick kept running while an
  insert waited 2 s for an unreachable server), so no real thread is needed. (Running
  inserts through `eventlet.tpool` would not work anyway: the client imported after
  monkey-patching owns green sockets and locks, which a real OS thread must not touch.)

Counters (`backlog`, `stored`, `sink_errors`) change on the hub's thread only and move
exactly as in `servers.runtimes.asyncio.sinks`. Import this module only after monkey-patching.
"""

from __future__ import annotations

import contextlib
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from servers.contract import WS_SINK_MAX_PENDING, ServerOptions
from servers.core.sinks import (
    CLOSE_TIMEOUT_S,
    FLUSH_INTERVAL_S,
    FileBatch,
    SinkUnavailable,
    open_sink,
    records_collection,
)
from servers.core.state import ServerState


class GreenEvent(Protocol):
    """A resettable green event (`gevent.event.Event`, eventlet's green `threading.Event`)."""

    def set(self) -> None: ...

    def clear(self) -> None: ...

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


@dataclass(frozen=True)
class GreenRuntime:
    """The framework's primitives the sinks (and servers.runtimes.green.backends and
    .deadlines) are written in."""

    spawn: Callable[..., object]  # spawn(fn, *args): run fn in a new green thread
    event: Callable[[], GreenEvent]  # a new, unset, resettable green event
    # run_in_thread(fn, *args): fn's result (or exception), computed on a real OS thread;
    # only the calling green thread waits for it.
    run_in_thread: Callable[..., Any]
    # a new, empty, unbounded green FIFO queue (servers.runtimes.green.backends' memcached pool)
    queue: Callable[[], Any]
    # call_later(seconds, fn) -> cancel: fn runs on the hub after `seconds` (the client
    # deadlines' timer, servers.runtimes.green.deadlines.CallLater)
    call_later: Callable[[float, Callable[[], None]], Callable[[], None]]


def _warn(message: str) -> None:
    print(f"servers: {message}", file=sys.stderr, flush=True)


class GreenEmptySink:
    """Counts and drops."""

    def __init__(self, state: ServerState) -> None:
        self._state = state

    def store(self, record: dict[str, Any]) -> bool:
        self._state.stored += 1
        return True

    def store_and_wait(self, record: dict[str, Any]) -> None:
        self._state.stored += 1

    def close(self) -> None:
        return None


class _BatchOutcome:
    """What the `/log` requests whose records share one write wait on."""

    __slots__ = ("_done", "_error")

    def __init__(self, done: GreenEvent) -> None:
        self._done = done
        self._error: BaseException | None = None

    def settle(self, error: BaseException | None) -> None:
        self._error = error
        self._done.set()

    def wait(self) -> None:
        self._done.wait()
        error = self._error
        if error is None:
            return
        if isinstance(error, (OSError, SinkUnavailable)):
            raise SinkUnavailable(str(error))
        raise RuntimeError(f"file sink write failed: {error!r}")  # a bug: /log answers 500


class GreenFileSink:
    """Batched JSON lines: `/log` waits for its batch's write; messages wait ≤ 100 ms."""

    def __init__(
        self, state: ServerState, path: str, runtime: GreenRuntime, durable: bool = False
    ) -> None:
        self._state = state
        self._runtime = runtime
        self._batch = FileBatch(path, durable)
        self._pending = runtime.event()  # records wait in the batch
        self._urgent = runtime.event()  # a /log request waits: write now, not in 100 ms
        self._outcome: _BatchOutcome | None = None  # for the /log requests of the batch
        self._closing = False  # close() asked the writer to write everything and end
        self._closed = False  # the writer ended: nothing can be written any more
        self._writer_done = runtime.event()
        runtime.spawn(self._writer)

    def store(self, record: dict[str, Any]) -> bool:
        if self._closed:  # after shutdown's flush: it cannot be written any more
            self._state.sink_errors += 1
            return True  # counted; the connection is being closed with 1001 anyway
        self._batch.add(record)
        self._state.backlog += 1
        self._pending.set()
        return True

    def store_and_wait(self, record: dict[str, Any]) -> None:
        if self._closed:
            self._state.sink_errors += 1
            raise SinkUnavailable("the file sink is closed")
        self._batch.add(record)
        self._state.backlog += 1
        outcome = self._outcome
        if outcome is None:
            outcome = self._outcome = _BatchOutcome(self._runtime.event())
        self._pending.set()
        # The writer wakes on the hub's next turn: every /log request that runs before it
        # shares one write.
        self._urgent.set()
        outcome.wait()

    def _writer(self) -> None:
        """The only green thread that writes: one batch at a time, in order."""
        try:
            while True:
                if not self._closing:
                    self._pending.wait()
                self._pending.clear()
                if not self._closing:
                    # Messages wait ≤ 100 ms to share a write; a /log request cuts it short.
                    self._urgent.wait(FLUSH_INTERVAL_S)
                self._urgent.clear()
                self._flush()
                if self._closing and not len(self._batch) and self._outcome is None:
                    return
        finally:
            self._writer_done.set()

    def _flush(self) -> None:
        data, count = self._batch.take()
        outcome, self._outcome = self._outcome, None
        error: BaseException | None = None
        if count:
            try:
                self._runtime.run_in_thread(self._batch.write, data)
            except OSError as failure:  # the disk: /log answers 503
                error = failure
            except Exception as failure:  # a bug: logged; the writer goes on
                error = failure
                _warn("file sink write failed:\n" + traceback.format_exc())
            if error is None:
                self._state.stored += count
            else:
                self._state.sink_errors += count
            self._state.backlog -= count
        if outcome is not None:
            outcome.settle(error)

    def close(self) -> None:
        """Write everything accepted (≤ 2 s), then close the file."""
        self._closing = True
        self._pending.set()
        self._urgent.set()
        finished = self._writer_done.wait(CLOSE_TIMEOUT_S)
        self._closed = True
        if not finished:  # a write is stuck: its thread may still use the descriptor
            _warn(f"file sink: a write did not end within {CLOSE_TIMEOUT_S} s")
            return
        self._batch.close()


class GreenMongoSink:
    """One document per record through pymongo's sync client on green sockets.

    Every insert blocks only its own green thread: `/log` inserts in the request's green
    thread, a WebSocket message's insert in a green thread of its own (fire and forget).
    With the database down each insert fails after serverSelectionTimeoutMS, all of them
    at once (no thread pool to queue behind).
    """

    def __init__(
        self,
        state: ServerState,
        url: str,
        w: int,
        database: str,
        runtime: GreenRuntime,
        durable: bool = False,
    ) -> None:
        from pymongo import MongoClient
        from pymongo.errors import PyMongoError

        self._state = state
        self._runtime = runtime
        self._errors = PyMongoError
        # The constructor does no I/O: it starts pymongo's monitor (green) threads.
        self._client, self._collection = records_collection(MongoClient, url, w, database, durable)
        self._in_flight = 0
        self._queued = 0  # WebSocket messages' inserts in flight (bounded)
        self._idle = runtime.event()  # set while no insert is in flight
        self._idle.set()
        self._closed = False

    def _begin(self) -> None:
        if self._closed:  # after shutdown closed the client
            self._state.sink_errors += 1
            raise SinkUnavailable("the mongo sink is closed")
        self._state.backlog += 1
        self._in_flight += 1
        self._idle.clear()

    def _insert(self, document: dict[str, Any]) -> None:
        """One insert, counted in `_begin` already; blocks the calling green thread."""
        try:
            self._collection.insert_one(document)
        except self._errors as error:
            self._state.sink_errors += 1
            raise SinkUnavailable(str(error)) from error
        finally:
            self._state.backlog -= 1
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.set()
        self._state.stored += 1

    def _insert_quietly(self, document: dict[str, Any]) -> None:
        try:
            with contextlib.suppress(SinkUnavailable):  # counted in sink_errors already
                self._insert(document)
        finally:
            self._queued -= 1

    def store(self, record: dict[str, Any]) -> bool:
        """False, the record refused and counted in sink_errors, when WS_SINK_MAX_PENDING
        messages already wait for their inserts."""
        if self._queued >= WS_SINK_MAX_PENDING:
            self._state.sink_errors += 1
            return False
        try:
            self._begin()
        except SinkUnavailable:
            return True  # after shutdown: counted in sink_errors already
        self._queued += 1
        # insert_one adds _id to the dict it is given: hand it a copy
        self._runtime.spawn(self._insert_quietly, dict(record))
        return True

    def store_and_wait(self, record: dict[str, Any]) -> None:
        self._begin()
        self._insert(dict(record))

    def close(self) -> None:
        """Wait for the inserts in flight, then close the client: ≤ 2 s in all."""
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        if not self._idle.wait(CLOSE_TIMEOUT_S):
            _warn(f"mongo sink: {self._in_flight} inserts did not end within {CLOSE_TIMEOUT_S} s")
        self._closed = True
        # close() may talk to the server (endSessions): bounded, in a green thread of its own.
        closed = self._runtime.event()

        def close_client() -> None:
            try:
                self._client.close()
            except Exception as error:  # shutting down: say so, do not fail the exit
                _warn(f"mongo sink: closing the client failed: {error!r}")
            finally:
                closed.set()

        self._runtime.spawn(close_client)
        if not closed.wait(max(deadline - time.monotonic(), 0.1)):
            _warn("mongo sink: the client did not close in time")


GreenSink = GreenEmptySink | GreenFileSink | GreenMongoSink


def open_green_sink(options: ServerOptions, state: ServerState, runtime: GreenRuntime) -> GreenSink:
    """The green sink `options` ask for."""
    return open_sink(
        options,
        empty=lambda: GreenEmptySink(state),
        file=lambda path: GreenFileSink(state, path, runtime, durable=options.durable),
        mongo=lambda url, w, database: GreenMongoSink(
            state, url, w, database, runtime, durable=options.durable
        ),
    )
