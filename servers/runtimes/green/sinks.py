"""Sinks on green threads (gevent, eventlet): blocking calls that block one green thread only.

One implementation serves both frameworks; a `GreenRuntime` supplies what differs (how to
spawn a green thread, a green event, how to run a function on a real OS thread).

- File: records gather in a `FileCommit`; ONE writer green thread hands each batch's
  `write()` to a real OS thread (the hub never blocks on the disk, and one write at a time
  keeps the lines in order). The `/log` requests whose records share a write wait on one
  green event; WebSocket messages are written within `FLUSH_INTERVAL_S`.
- MongoDB: pymongo's synchronous `MongoClient` on monkey-patched (green) sockets and locks,
  by group commit (servers.core.sinks.GroupCommit): each batch's `insert_many` blocks a
  green thread of its own, and each `/log` request's green thread waits on a green event.
  Measured under both gevent's `patch_all` and eventlet's `monkey_patch` against
  FerretDB: inserts and the serverSelectionTimeoutMS failure both work green (the 10 ms
  tick kept running while an insert waited 2 s for an unreachable server), so no real
  thread is needed. (Running
  inserts through `eventlet.tpool` would not work anyway: the client imported after
  monkey-patching owns green sockets and locks, which a real OS thread must not touch.)

What is written together and when, the counters (`backlog`, `stored`, `sink_errors`, changed
on the hub's thread only) and what a failure answers are servers.core.sinks', as on every
runtime. Import this module only after monkey-patching.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from servers.contract import ServerOptions
from servers.core import sinks
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


class GreenEmptySink(sinks.EmptySink):
    """Counts and drops."""

    def store_and_wait(self, record: dict[str, Any]) -> None:
        self._state.stored += 1

    def close(self) -> None:
        return None


class _Outcome:
    """What `/log` requests (or shutdown draining the mongo sink) wait on: a green event,
    and the failure, if any, of the write or insert that settled it. The file sink's
    requests whose records share one write share one."""

    __slots__ = ("_answer", "_done", "_error")

    def __init__(self, done: GreenEvent) -> None:
        self._done = done
        self._error: BaseException | None = None
        self._answer: Callable[[BaseException], Exception] | None = None

    def settle(
        self, error: BaseException | None, answer: Callable[[BaseException], Exception]
    ) -> None:
        self._error = error
        self._answer = answer
        self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """False when `timeout` passed first; raises the failure's answer (503 or 500), a
        new one in each waiting green thread."""
        if not self._done.wait(timeout):
            return False
        if self._error is not None and self._answer is not None:
            raise self._answer(self._error)
        return True


def _wake(
    outcomes: list[_Outcome],
    error: BaseException | None,
    answer: Callable[[BaseException], Exception],
) -> None:
    """Wake the green threads waiting on `outcomes`: stored (`error` None), or failed."""
    for outcome in outcomes:
        outcome.settle(error, answer)


class GreenFileSink:
    """Batched JSON lines (`FileCommit`): `/log` waits for its batch's write; messages wait
    ≤ 100 ms."""

    def __init__(self, state: ServerState, options: ServerOptions, runtime: GreenRuntime) -> None:
        self._runtime = runtime
        self._commit: sinks.FileCommit[_Outcome] = sinks.FileCommit(state, options)
        self._pending = runtime.event()  # records wait in the batch
        self._urgent = runtime.event()  # a /log request waits: write now, not in 100 ms
        self._closing = False  # close() asked the writer to write everything and end
        self._writer_done = runtime.event()
        self._outcome: _Outcome | None = None  # for the /log requests of the next write
        runtime.spawn(self._writer)

    def store(self, record: dict[str, Any]) -> bool:
        self._commit.take_message(record)
        self._pending.set()
        return True

    def store_and_wait(self, record: dict[str, Any]) -> None:
        outcome = self._outcome
        if outcome is None:  # the first request of the next write: one event wakes them all
            outcome = self._outcome = _Outcome(self._runtime.event())
        self._commit.take_request(record, outcome)
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
                    self._urgent.wait(sinks.FLUSH_INTERVAL_S)
                self._urgent.clear()
                if self._commit.start_write():  # always: no other writer
                    self._write()
                if self._closing and not self._commit.pending:
                    return
        finally:
            self._writer_done.set()

    def _write(self) -> None:
        write = self._commit.take_write()
        self._outcome = None  # the requests from now on wait for the next write
        error: BaseException | None = None
        if write.records:
            try:
                self._runtime.run_in_thread(self._commit.batch.write, write.data)
            except Exception as failure:  # the disk's (503), or a bug (500)
                error = failure
                if self._commit.is_bug(failure):  # logged; the writer goes on
                    _warn("file sink write failed:\n" + traceback.format_exc())
        _wake(self._commit.settle(write, error), error, self._commit.answer)

    def close(self) -> None:
        """Write everything accepted (≤ 2 s), then close the file."""
        self._closing = True
        self._pending.set()
        self._urgent.set()
        finished = self._writer_done.wait(sinks.CLOSE_TIMEOUT_S)
        self._commit.close()
        if not finished:  # a write is stuck: its thread may still use the descriptor
            _warn(f"file sink: a write did not end within {sinks.CLOSE_TIMEOUT_S} s")
            return
        self._commit.batch.close()


class GreenMongoSink:
    """Group commit (`GroupCommit`) through pymongo's sync client on green sockets.

    Each batch's `insert_many` blocks a green thread of its own; a `/log` request's green
    thread waits on a green event of its own until its batch was acknowledged. A partial
    batch goes out from a flusher green thread spawned for the hub's next turn, so every
    request that runs before it shares the batch. With the database down each batch fails
    after serverSelectionTimeoutMS, all of them at once (no thread pool to queue behind).
    """

    def __init__(self, state: ServerState, options: ServerOptions, runtime: GreenRuntime) -> None:
        from pymongo import MongoClient

        self._runtime = runtime
        # The constructor does no I/O: it starts pymongo's monitor (green) threads.
        self._client, self._collection = sinks.records_collection(MongoClient, options)
        self._commit: sinks.GroupCommit[_Outcome] = sinks.GroupCommit(state, options.mongo_batch)
        self._flush_scheduled = False

    def store(self, record: dict[str, Any]) -> bool:
        """False, the record refused and counted in sink_errors, when WS_SINK_MAX_PENDING
        messages already wait for their inserts."""
        if not self._commit.take_message(record):
            return False
        self._schedule()
        return True

    def store_and_wait(self, record: dict[str, Any]) -> None:
        outcome = _Outcome(self._runtime.event())
        self._commit.take_request(record, outcome)
        self._schedule()
        outcome.wait()

    def _schedule(self) -> None:
        """A full batch goes now; otherwise what is due goes on the hub's next turn."""
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

    def _insert(self, batch: sinks.MongoBatch[_Outcome]) -> None:
        """One batch's insert_many, blocking this green thread only."""
        commit = self._commit
        error: BaseException | None = None
        try:
            self._collection.insert_many(batch.documents, ordered=True)
        except Exception as failure:  # the database's (503), or a bug (500)
            error = failure
            if commit.is_bug(failure):  # logged
                _warn("mongo sink insert failed:\n" + traceback.format_exc())
        _wake(commit.settle(batch, stored=error is None), error, commit.answer)
        self._send_due()  # the records that waited for this batch go now
        _wake(commit.idle_waiters(), None, commit.answer)

    def close(self) -> None:
        """Insert everything taken, then close the client: ≤ 2 s in all."""
        deadline = time.monotonic() + sinks.CLOSE_TIMEOUT_S
        self._send_due()
        idle = _Outcome(self._runtime.event())
        if self._commit.when_idle(idle) and not idle.wait(sinks.CLOSE_TIMEOUT_S):
            in_flight = self._commit.in_flight
            _warn(f"mongo sink: {in_flight} batches did not end within {sinks.CLOSE_TIMEOUT_S} s")
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
    kinds = {"empty": GreenEmptySink, "file": GreenFileSink, "mongo": GreenMongoSink}
    return sinks.open_sink(kinds, options, state, runtime)
