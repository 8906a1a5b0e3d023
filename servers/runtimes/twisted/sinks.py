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
fires once everything accepted was written, bounded by `CLOSE_TIMEOUT_S`. What is written
together and when, the counters and what a failure answers are servers.core.sinks'
(`FileCommit`, `GroupCommit`), as on every runtime.

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
from collections.abc import Callable
from typing import Any

from twisted.internet import threads
from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from servers.contract import ServerOptions
from servers.core import sinks
from servers.core.state import ServerState

# Inserts in flight at once. 5, 10, 25 and 50 threads all gave 460-580 /log req/s (w:1,
# wrk -c50) against FerretDB/SQLite, which is the limit there.
MONGO_THREADS = 10
SELECTION_TIMEOUT_S = sinks.MONGO_SERVER_SELECTION_TIMEOUT_MS / 1000

_log = Logger()


def _daemon_thread(*args: Any, **kwargs: Any) -> threading.Thread:
    # A write or insert still stuck after sinks.CLOSE_TIMEOUT_S must not keep the process alive.
    return threading.Thread(*args, daemon=True, **kwargs)


def start_pool(threads_: int, name: str) -> ThreadPool:
    """A started pool of up to `threads_` daemon threads (the sinks' and GridFS reads')."""
    pool = ThreadPool(minthreads=1, maxthreads=threads_, name=name)
    pool.threadFactory = _daemon_thread  # type: ignore[assignment]
    pool.start()
    return pool


class TwistedEmptySink(sinks.EmptySink):
    """Counts and drops."""

    def store_and_wait(self, record: dict[str, Any]) -> Deferred[None] | None:
        self._state.stored += 1
        return None

    def close(self) -> Deferred[None]:
        return succeed(None)


# The commit of either kind: its `take_request`, `is_bug` and `close` are what is used here.
_Commit = sinks.FileCommit[Deferred[None]] | sinks.GroupCommit[Deferred[None]]


def _fire(
    waiters: list[Deferred[None]],
    error: BaseException | None,
    answer: Callable[[BaseException], Exception],
) -> None:
    """Fire `waiters`: stored (`error` None), or failed with `answer(error)`."""
    for waiter in waiters:
        if waiter.called:
            continue
        if error is None:
            waiter.callback(None)
        else:
            waiter.errback(Failure(answer(error)))


def _request(commit: _Commit, record: dict[str, Any]) -> Deferred[None]:
    """What a `/log` request waits on, its record taken by `commit`: a Deferred fired with
    its write or batch, or failed already (`called`) when the sink is closed."""
    waiter: Deferred[None] = Deferred()
    try:
        commit.take_request(record, waiter)
    except sinks.SinkUnavailable as error:
        return fail(error)
    return waiter


def _cancel(call: Any) -> None:
    """Cancel `call`, an IDelayedCall of a planned flush, unless there is none."""
    if call is not None:
        call.cancel()


def _shut_down(result: object, commit: _Commit, pool: ThreadPool, what: str) -> bool:
    """The end of a sink's `close`, `result` its drain's: refuse records from now on, then
    stop `pool` — True — or, when the drain timed out, say `what` did not end within
    CLOSE_TIMEOUT_S and leave the pool (its threads are daemons) — False."""
    commit.close()
    if isinstance(result, Failure):
        timeout_s = sinks.CLOSE_TIMEOUT_S
        _log.warn("{what}: not done within {s} s: {f}", what=what, s=timeout_s, f=result)
        return False
    pool.stop()  # idle: every call on it has ended, so the join returns at once
    return True


def _ended(result: object, commit: _Commit, what: str) -> BaseException | None:
    """The exception a pool thread's call ended with (None: it returned), logged when it is
    a bug (its requests answer 500) rather than the disk's or the database's."""
    if not isinstance(result, Failure):
        return None
    if commit.is_bug(result.value):
        _log.failure(what, result)
    return result.value


class TwistedFileSink:
    """Batched JSON lines (`FileCommit`): `/log` waits for its batch's write; messages wait
    ≤ 100 ms."""

    def __init__(self, state: ServerState, options: ServerOptions, reactor: Any) -> None:
        self._reactor = reactor
        self._commit: sinks.FileCommit[Deferred[None]] = sinks.FileCommit(state, options)
        self._pool = start_pool(1, "file-sink")
        self._flush_call: Any = None  # IDelayedCall of the next flush
        self._writing: Deferred[None] | None = None  # the write in flight

    def store(self, record: dict[str, Any]) -> bool:
        self._commit.take_message(record)
        if self._flush_call is None and self._commit.pending:
            self._flush_call = self._reactor.callLater(sinks.FLUSH_INTERVAL_S, self._flush)
        return True

    def store_and_wait(self, record: dict[str, Any]) -> Deferred[None]:
        waiter = _request(self._commit, record)
        if not waiter.called:
            if self._flush_call is not None:
                self._flush_call.cancel()
            # Next reactor turn: every /log request that arrived meanwhile shares one write.
            self._flush_call = self._reactor.callLater(0, self._flush)
        return waiter

    def _flush(self) -> None:
        self._flush_call = None
        if self._commit.start_write():  # else it starts again when the one in flight ends
            self._write()

    def _write(self) -> None:
        write = self._commit.take_write()
        if not write.records:
            self._written(None, write)
            return
        writing = threads.deferToThreadPool(
            self._reactor, self._pool, self._commit.batch.write, write.data
        )
        self._writing = writing
        writing.addBoth(self._written, write)

    def _written(self, result: object, write: sinks.FileWrite[Deferred[None]]) -> None:
        """On the reactor thread: answer the write's requests, start the next if asked."""
        self._writing = None
        error = _ended(result, self._commit, "file sink write failed")
        _fire(self._commit.settle(write, error), error, self._commit.answer)
        if self._commit.again():
            self._write()

    def close(self) -> Deferred[None]:
        """Write what is pending (after the write in flight), close the file, stop the pool."""
        _cancel(self._flush_call)
        self._flush_call = None
        done: Deferred[None] = Deferred()

        def settle() -> None:
            if done.called:
                return
            if self._writing is not None:  # look again when it ends (its end may flush)
                self._writing.addBoth(lambda _: settle())
            elif self._commit.pending and self._commit.start_write():
                self._write()
                settle()
            else:
                done.callback(None)

        settle()
        done.addTimeout(sinks.CLOSE_TIMEOUT_S, self._reactor)
        return done.addBoth(self._close_file)

    def _close_file(self, result: object) -> None:
        _cancel(self._flush_call)  # a message's, taken while the last write was in flight
        self._flush_call = None
        if _shut_down(result, self._commit, self._pool, "file sink writes"):
            self._commit.batch.close()  # not while a stuck write may still use it


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

    def __init__(self, state: ServerState, options: ServerOptions, reactor: Any) -> None:
        from pymongo import MongoClient

        self._reactor = reactor
        # The constructor does no I/O: it starts pymongo's (daemon) monitor threads.
        self._client, self._collection = sinks.records_collection(MongoClient, options)
        self._commit: sinks.GroupCommit[Deferred[None]] = sinks.GroupCommit(
            state, options.mongo_batch
        )
        self._pool = start_pool(MONGO_THREADS, "mongo-sink")
        self._unreachable = False  # the last insert could not reach the database
        self._flush_call: Any = None  # IDelayedCall of the next turn's flush

    def store(self, record: dict[str, Any]) -> bool:
        """False, the record refused and counted in sink_errors, when WS_SINK_MAX_PENDING
        messages already wait for their inserts (queued for the pool's threads)."""
        if not self._commit.take_message(record):
            return False
        self._schedule()
        return True

    def store_and_wait(self, record: dict[str, Any]) -> Deferred[None]:
        waiter = _request(self._commit, record)
        if not waiter.called:
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

    def _insert_blocking(self, batch: sinks.MongoBatch[Deferred[None]], queued_at: float) -> None:
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

    def _settle(self, result: object, batch: sinks.MongoBatch[Deferred[None]]) -> None:
        """On the reactor thread: answer the batch's requests, send what waited for it."""
        commit = self._commit
        error = _ended(result, commit, "mongo sink insert failed")
        _fire(commit.settle(batch, stored=error is None), error, commit.answer)
        self._send_due()
        _fire(commit.idle_waiters(), None, commit.answer)

    def close(self) -> Deferred[None]:
        """Insert everything taken, close the client, stop the pool: ≤ 2 s in all."""
        _cancel(self._flush_call)
        self._flush_call = None
        self._send_due()
        done: Deferred[None] = Deferred()
        idle: Deferred[None] = Deferred()
        if not self._commit.when_idle(idle):
            idle.callback(None)

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
        done.addTimeout(sinks.CLOSE_TIMEOUT_S, self._reactor)
        return done.addBoth(self._stop_pool)

    def _stop_pool(self, result: object) -> None:
        _cancel(self._flush_call)  # a record's, taken while the client was closing
        self._flush_call = None
        _shut_down(result, self._commit, self._pool, "mongo sink inserts and close")


TwistedSink = TwistedEmptySink | TwistedFileSink | TwistedMongoSink


def open_twisted_sink(options: ServerOptions, state: ServerState, reactor: Any) -> TwistedSink:
    """The Twisted sink `options` ask for."""
    kinds = {"empty": TwistedEmptySink, "file": TwistedFileSink, "mongo": TwistedMongoSink}
    return sinks.open_sink(kinds, options, state, reactor)
