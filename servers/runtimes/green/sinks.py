"""Sinks on green threads (gevent, eventlet): blocking calls that block one green thread only.

One implementation serves both frameworks; a `GreenRuntime` supplies what differs (how to
spawn a green thread, a green event, how to run a function on a real OS thread).

- File: records gather in a `FileBatch`; ONE writer green thread hands each batch's
  `write()` to a real OS thread (the hub never blocks on the disk, and one write at a time
  keeps the lines in order). A `/log` request's green thread waits until the batch holding
  its record was written; WebSocket messages are written within `FLUSH_INTERVAL_S`.
- MongoDB: pymongo's synchronous `MongoClient` on monkey-patched (green) sockets and locks,
  by group commit (servers.core.sinks.GroupCommit): each batch's `insert_many` blocks a
  green thread of its own, and each `/log` request's green thread waits on a green event.
  Measured under both gevent's `patch_all` and eventlet's `monkey_patch` against
  FerretDB: inserts and the serverSelectionTimeoutMS failure both work green (the 10 ms
  tick kept running while an insert waited 2 s for an unreachable server), so no real
  thread is needed. (Running
  inserts through `eventlet.tpool` would not work anyway: the client imported after
  monkey-patching owns green sockets and locks, which a real OS thread must not touch.)

Counters (`backlog`, `stored`, `sink_errors`) change on the hub's thread only and move
exactly as in `servers.runtimes.asyncio.sinks`. Import this module only after monkey-patching.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from servers.contract import MONGO_BATCH_MAX_RECORDS, ServerOptions
from servers.core.sinks import (
    CLOSE_TIMEOUT_S,
    FLUSH_INTERVAL_S,
    FileBatch,
    GroupCommit,
    MongoBatch,
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
    """What a `/log` request waits on: the file sink's batch (shared by the requests whose
    records share one write), or the mongo sink's request (one each)."""

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
        raise RuntimeError(f"sink failed: {error!r}")  # a bug: /log answers 500


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
    """Group commit (`GroupCommit`) through pymongo's sync client on green sockets.

    Each batch's `insert_many` blocks a green thread of its own; a `/log` request's green
    thread waits on a green event of its own until its batch was acknowledged. A partial
    batch goes out from a flusher green thread spawned for the hub's next turn, so every
    request that runs before it shares the batch. With the database down each batch fails
    after serverSelectionTimeoutMS, all of them at once (no thread pool to queue behind).
    """

    def __init__(
        self,
        state: ServerState,
        url: str,
        w: int,
        database: str,
        runtime: GreenRuntime,
        durable: bool = False,
        max_records: int = MONGO_BATCH_MAX_RECORDS,
    ) -> None:
        from pymongo import MongoClient
        from pymongo.errors import PyMongoError

        self._runtime = runtime
        self._errors = PyMongoError
        # The constructor does no I/O: it starts pymongo's monitor (green) threads.
        self._client, self._collection = records_collection(MongoClient, url, w, database, durable)
        self._commit: GroupCommit[_BatchOutcome] = GroupCommit(state, max_records)
        self._flush_scheduled = False
        self._idle = runtime.event()  # set while nothing waits or is in flight
        self._idle.set()

    def store(self, record: dict[str, Any]) -> bool:
        """False, the record refused and counted in sink_errors, when WS_SINK_MAX_PENDING
        messages already wait for their inserts."""
        if not self._commit.take_message(record):
            return False
        self._schedule()
        return True

    def store_and_wait(self, record: dict[str, Any]) -> None:
        outcome = _BatchOutcome(self._runtime.event())
        self._commit.take_request(record, outcome)
        self._schedule()
        outcome.wait()

    def _schedule(self) -> None:
        """A full batch goes now; otherwise what is due goes on the hub's next turn."""
        if not self._commit.idle:
            self._idle.clear()
        if self._commit.full():
            self._send_due()
        elif not self._flush_scheduled and self._commit.due():
            self._flush_scheduled = True
            self._runtime.spawn(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        self._send_due()

    def _send_due(self) -> None:
        while (batch := self._commit.next_batch()) is not None:
            self._runtime.spawn(self._insert, batch)

    def _insert(self, batch: MongoBatch[_BatchOutcome]) -> None:
        """One batch's insert_many, blocking this green thread only."""
        error: BaseException | None = None
        try:
            self._collection.insert_many(batch.documents, ordered=True)
        except self._errors as failure:
            error = SinkUnavailable(str(failure))
        except Exception as failure:  # a bug: logged; its requests answer 500
            error = failure
            _warn("mongo sink insert failed:\n" + traceback.format_exc())
        for outcome in self._commit.settle(batch, stored=error is None):
            outcome.settle(error)
        self._send_due()  # the records that waited for this batch go now
        if self._commit.idle:
            self._idle.set()

    def close(self) -> None:
        """Insert everything taken, then close the client: ≤ 2 s in all."""
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        self._send_due()
        if not self._idle.wait(CLOSE_TIMEOUT_S):
            in_flight = self._commit.in_flight
            _warn(f"mongo sink: {in_flight} batches did not end within {CLOSE_TIMEOUT_S} s")
        self._commit.close()
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
            state,
            url,
            w,
            database,
            runtime,
            durable=options.durable,
            max_records=options.mongo_batch,
        ),
    )
