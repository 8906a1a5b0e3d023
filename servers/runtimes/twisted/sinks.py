"""Sinks on Twisted: blocking work on dedicated `ThreadPool`s, results back as Deferreds.

The reactor never blocks: the file's `write()` runs on a one-thread pool (one thread and
one write in flight keep the lines in order), and MongoDB inserts (one `insert_many` per
group-commit batch, servers.core.sinks.GroupCommit) run on a ten-thread pool with
pymongo's synchronous client, all through `threads.deferToThreadPool`. Counters
(`backlog`, `stored`, `sink_errors`) change on the reactor thread only, exactly as in
`servers.runtimes.asyncio.sinks`.

`store_and_wait` returns a Deferred that fires once the record is stored (errback with
`SinkUnavailable` when the sink refused it), or None when it was stored at once (the empty
sink: `/log` then answers without the cost of a Deferred). `close` returns a Deferred that
fires once everything accepted was written, bounded by `CLOSE_TIMEOUT_S`.

Why pymongo's sync client on threads rather than txmongo (Twisted-native): measured on
this 2-CPU host, POST /log with wrk -t1 -c50 -d5s, server on CPU 0, wrk and FerretDB 1.24
(SQLite) on CPU 1, two runs each: pymongo on 10 threads 687-707 req/s with w:1 and
2,100-2,440 with w:0; txmongo 26.0 (ConnectionPool of 10) 494-653 with w:1 and 1,190-1,370
with w:0. txmongo is not better, would be one more dependency, and its operations wait
for a reconnection unless each is given a timeout; pymongo fails after
serverSelectionTimeoutMS (the contract's 503).

Pool threads are daemons: a write or insert still stuck when `close` gives up does not
keep the process from exiting.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from twisted.internet import threads
from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from servers.contract import MONGO_BATCH_MAX_RECORDS, ServerOptions
from servers.core.sinks import (
    CLOSE_TIMEOUT_S,
    FLUSH_INTERVAL_S,
    MONGO_SERVER_SELECTION_TIMEOUT_MS,
    FileBatch,
    GroupCommit,
    MongoBatch,
    SinkUnavailable,
    open_sink,
    records_collection,
)
from servers.core.state import ServerState

# Inserts in flight at once. 5, 10, 25 and 50 threads all gave 460-580 /log req/s (w:1,
# wrk -c50) against FerretDB/SQLite, which is the limit there.
MONGO_THREADS = 10
SELECTION_TIMEOUT_S = MONGO_SERVER_SELECTION_TIMEOUT_MS / 1000

_log = Logger()


def _daemon_thread(*args: Any, **kwargs: Any) -> threading.Thread:
    # A write or insert still stuck after CLOSE_TIMEOUT_S must not keep the process alive.
    return threading.Thread(*args, daemon=True, **kwargs)


def start_pool(threads_: int, name: str) -> ThreadPool:
    """A started pool of up to `threads_` daemon threads (the sinks' and GridFS reads')."""
    pool = ThreadPool(minthreads=1, maxthreads=threads_, name=name)
    pool.threadFactory = _daemon_thread  # type: ignore[assignment]
    pool.start()
    return pool


class TwistedEmptySink:
    """Counts and drops."""

    def __init__(self, state: ServerState) -> None:
        self._state = state

    def store(self, record: dict[str, Any]) -> bool:
        self._state.stored += 1
        return True

    def store_and_wait(self, record: dict[str, Any]) -> Deferred[None] | None:
        self._state.stored += 1
        return None

    def close(self) -> Deferred[None]:
        return succeed(None)


class TwistedFileSink:
    """Batched JSON lines: `/log` waits for its batch's write; messages wait ≤ 100 ms."""

    def __init__(self, state: ServerState, path: str, reactor: Any, durable: bool = False) -> None:
        self._state = state
        self._reactor = reactor
        self._batch = FileBatch(path, durable)
        self._pool = start_pool(1, "file-sink")
        self._waiters: list[Deferred[None]] = []
        self._flush_call: Any = None  # IDelayedCall of the next flush
        self._writing: Deferred[None] | None = None  # the write in flight
        self._again = False  # a flush was asked for while a write was in flight
        self._closed = False

    def store(self, record: dict[str, Any]) -> bool:
        if self._closed:  # after shutdown's flush: it cannot be written any more
            self._state.sink_errors += 1
            return True  # counted; the connection is being closed with 1001 anyway
        self._batch.add(record)
        self._state.backlog += 1
        if self._flush_call is None:
            self._flush_call = self._reactor.callLater(FLUSH_INTERVAL_S, self._start_flush)
        return True

    def store_and_wait(self, record: dict[str, Any]) -> Deferred[None]:
        if self._closed:
            self._state.sink_errors += 1
            return fail(SinkUnavailable("the file sink is closed"))
        self._batch.add(record)
        self._state.backlog += 1
        waiter: Deferred[None] = Deferred()
        self._waiters.append(waiter)
        if self._flush_call is not None:
            self._flush_call.cancel()
        # Next reactor turn: every /log request that arrived meanwhile shares one write.
        self._flush_call = self._reactor.callLater(0, self._start_flush)
        return waiter

    def _start_flush(self) -> None:
        self._flush_call = None
        if self._writing is None:
            self._flush()
        else:  # a write is under way: go again when it ends
            self._again = True

    def _flush(self) -> None:
        data, count = self._batch.take()
        waiters, self._waiters = self._waiters, []
        if not count:
            _fire(waiters, None)
            return
        writing = threads.deferToThreadPool(self._reactor, self._pool, self._batch.write, data)
        self._writing = writing
        writing.addCallbacks(
            self._written,
            self._failed,
            callbackArgs=(count, waiters),
            errbackArgs=(count, waiters),
        )
        writing.addBoth(self._write_ended)

    def _written(self, _: None, count: int, waiters: list[Deferred[None]]) -> None:
        self._state.stored += count
        self._state.backlog -= count
        _fire(waiters, None)

    def _failed(self, failure: Failure, count: int, waiters: list[Deferred[None]]) -> None:
        self._state.sink_errors += count
        self._state.backlog -= count
        if failure.check(OSError):
            _fire(waiters, Failure(SinkUnavailable(str(failure.value))))
        else:  # not the disk: a bug; its requests answer 500 rather than hang
            _log.failure("file sink write failed", failure)
            _fire(waiters, failure)

    def _write_ended(self, _: object) -> None:
        self._writing = None
        if self._again:
            self._again = False
            self._flush()

    def close(self) -> Deferred[None]:
        """Write what is pending (after the write in flight), close the file, stop the pool."""
        if self._flush_call is not None:
            self._flush_call.cancel()
            self._flush_call = None
        done: Deferred[None] = Deferred()

        def settle() -> None:
            if done.called:
                return
            if self._writing is not None:  # look again when it ends (its end may flush)
                self._writing.addBoth(lambda _: settle())
            elif len(self._batch) or self._waiters:
                self._flush()
                settle()
            else:
                done.callback(None)

        settle()
        done.addTimeout(CLOSE_TIMEOUT_S, self._reactor)
        return done.addBoth(self._close_file)

    def _close_file(self, result: object) -> None:
        self._closed = True
        if self._flush_call is not None:
            self._flush_call.cancel()
            self._flush_call = None
        if isinstance(result, Failure):  # timed out: the writer thread is a daemon
            _log.warn("file sink: a write did not end within {s} s", s=CLOSE_TIMEOUT_S)
            return
        self._pool.stop()  # idle: every write has ended, so the join returns at once
        self._batch.close()


class TwistedMongoSink:
    """Group commit (`GroupCommit`) through pymongo's sync client on a pool of threads.

    pymongo's `MongoClient` is thread-safe and pools its connections; each batch's
    `insert_many` blocks one pool thread (the GIL released while it waits on the socket),
    never the reactor. A `/log` request waits on a Deferred of its own, fired on the
    reactor thread when its batch was acknowledged (or failed). A partial batch goes out
    on the reactor's next turn (`callLater(0)`), so every request parsed in this turn
    shares it.

    With the database down every insert takes serverSelectionTimeoutMS to fail, and only
    MONGO_THREADS fail at a time: batches queued behind them would wait several timeouts,
    where the asyncio sinks fail each one after one timeout. So while the last attempt
    found the database unreachable, a batch that already waited that long in the queue
    fails at once (`ServerSelectionTimeoutError`, counted like any insert error).
    """

    def __init__(
        self,
        state: ServerState,
        url: str,
        w: int,
        database: str,
        reactor: Any,
        durable: bool = False,
        max_records: int = MONGO_BATCH_MAX_RECORDS,
    ) -> None:
        from pymongo import MongoClient

        self._reactor = reactor
        # The constructor does no I/O: it starts pymongo's (daemon) monitor threads.
        self._client, self._collection = records_collection(MongoClient, url, w, database, durable)
        self._commit: GroupCommit[Deferred[None]] = GroupCommit(state, max_records)
        self._pool = start_pool(MONGO_THREADS, "mongo-sink")
        self._unreachable = False  # the last insert could not reach the database
        self._flush_call: Any = None  # IDelayedCall of the next turn's flush
        self._on_idle: list[Deferred[None]] = []  # fired when nothing waits or is in flight

    def store(self, record: dict[str, Any]) -> bool:
        """False, the record refused and counted in sink_errors, when WS_SINK_MAX_PENDING
        messages already wait for their inserts (queued for the pool's threads)."""
        if not self._commit.take_message(record):
            return False
        self._schedule()
        return True

    def store_and_wait(self, record: dict[str, Any]) -> Deferred[None]:
        waiter: Deferred[None] = Deferred()
        try:
            self._commit.take_request(record, waiter)
        except SinkUnavailable as error:
            return fail(error)
        self._schedule()
        return waiter

    def _schedule(self) -> None:
        """A full batch goes now; otherwise what is due goes on the reactor's next turn."""
        if self._commit.full():
            self._send_due()
        elif self._flush_call is None and self._commit.due():
            self._flush_call = self._reactor.callLater(0, self._flush)

    def _flush(self) -> None:
        self._flush_call = None
        self._send_due()

    def _send_due(self) -> None:
        while (batch := self._commit.next_batch()) is not None:
            inserting = threads.deferToThreadPool(
                self._reactor, self._pool, self._insert_blocking, batch, time.monotonic()
            )
            inserting.addBoth(self._settle, batch)

    def _insert_blocking(self, batch: MongoBatch[Deferred[None]], queued_at: float) -> None:
        """One batch's insert_many, on a pool thread."""
        from pymongo.errors import ConnectionFailure, ServerSelectionTimeoutError

        if self._unreachable and time.monotonic() - queued_at >= SELECTION_TIMEOUT_S:
            raise ServerSelectionTimeoutError("the database is unreachable (queued too long)")
        try:
            self._collection.insert_many(batch.documents, ordered=True)
        except ConnectionFailure:
            self._unreachable = True
            raise
        self._unreachable = False

    def _settle(self, result: object, batch: MongoBatch[Deferred[None]]) -> None:
        """On the reactor thread: answer the batch's requests, send what waited for it."""
        from pymongo.errors import PyMongoError

        failure = result if isinstance(result, Failure) else None
        if failure is not None and not failure.check(PyMongoError):
            _log.failure("mongo sink insert failed", failure)  # a bug: answered 500
        for waiter in self._commit.settle(batch, stored=failure is None):
            if waiter.called:
                continue
            if failure is None:
                waiter.callback(None)
            elif failure.check(PyMongoError):
                waiter.errback(Failure(SinkUnavailable(failure.getErrorMessage())))
            else:
                waiter.errback(failure)
        self._send_due()
        if self._commit.idle:
            idle, self._on_idle = self._on_idle, []
            _fire(idle, None)

    def close(self) -> Deferred[None]:
        """Insert everything taken, close the client, stop the pool: ≤ 2 s in all."""
        if self._flush_call is not None:
            self._flush_call.cancel()
            self._flush_call = None
        self._send_due()
        done: Deferred[None] = Deferred()
        idle: Deferred[None] = Deferred()
        if self._commit.idle:
            idle.callback(None)
        else:
            self._on_idle.append(idle)

        def close_client(_: None) -> None:
            if done.called:  # timed out meanwhile
                return
            self._commit.close()  # no insert starts after this one: the pool stays idle
            # close() may talk to the server (endSessions): off the reactor too.
            closing = threads.deferToThreadPool(self._reactor, self._pool, self._client.close)
            closing.addCallbacks(
                lambda _: None if done.called else done.callback(None),
                lambda failure: None if done.called else done.errback(failure),
            )

        idle.addCallback(close_client)
        done.addTimeout(CLOSE_TIMEOUT_S, self._reactor)
        return done.addBoth(self._stop_pool)

    def _stop_pool(self, result: object) -> None:
        self._commit.close()
        if self._flush_call is not None:
            self._flush_call.cancel()
            self._flush_call = None
        if isinstance(result, Failure):  # timed out: the pool's threads are daemons
            _log.warn("mongo sink: not closed within {s} s: {f}", s=CLOSE_TIMEOUT_S, f=result)
            return
        self._pool.stop()  # idle: every insert and the client's close have ended


TwistedSink = TwistedEmptySink | TwistedFileSink | TwistedMongoSink


def _fire(waiters: list[Deferred[None]], result: Failure | None) -> None:
    for waiter in waiters:
        if not waiter.called:
            if result is None:
                waiter.callback(None)
            else:
                waiter.errback(result)


def open_twisted_sink(options: ServerOptions, state: ServerState, reactor: Any) -> TwistedSink:
    """The Twisted sink `options` ask for."""
    return open_sink(
        options,
        empty=lambda: TwistedEmptySink(state),
        file=lambda path: TwistedFileSink(state, path, reactor, durable=options.durable),
        mongo=lambda url, w, database: TwistedMongoSink(
            state,
            url,
            w,
            database,
            reactor,
            durable=options.durable,
            max_records=options.mongo_batch,
        ),
    )
