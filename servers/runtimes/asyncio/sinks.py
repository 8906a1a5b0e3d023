"""Sinks on asyncio (aiohttp, tornado): file writes on one worker thread, pymongo's async client.

The loop never blocks: the file's `write()` runs on a single-thread executor (one thread
keeps the lines in order), and MongoDB inserts use `pymongo.AsyncMongoClient`, one task per
group-commit batch (servers.core.sinks.GroupCommit), a future per waiting `/log` request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

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


class AsyncEmptySink:
    """Counts and drops."""

    def __init__(self, state: ServerState) -> None:
        self._state = state

    def store(self, record: dict[str, Any]) -> bool:
        self._state.stored += 1
        return True

    async def store_and_wait(self, record: dict[str, Any]) -> None:
        self._state.stored += 1

    async def aclose(self) -> None:
        return None


class AsyncFileSink:
    """Batched JSON lines: `/log` waits for its batch's write; messages wait ≤ 100 ms."""

    def __init__(self, state: ServerState, path: str, durable: bool = False) -> None:
        self._state = state
        self._batch = FileBatch(path, durable)
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="file-sink")
        self._waiters: list[asyncio.Future[None]] = []
        self._flush_handle: asyncio.Handle | None = None
        self._flushing: asyncio.Task[None] | None = None

    def store(self, record: dict[str, Any]) -> bool:
        self._batch.add(record)
        self._state.backlog += 1
        if self._flush_handle is None:
            loop = asyncio.get_running_loop()
            self._flush_handle = loop.call_later(FLUSH_INTERVAL_S, self._start_flush)
        return True

    async def store_and_wait(self, record: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        self._batch.add(record)
        self._state.backlog += 1
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        if self._flush_handle is not None:
            self._flush_handle.cancel()
        # Next loop iteration: every /log request that arrived meanwhile shares one write.
        self._flush_handle = loop.call_soon(self._start_flush)
        await waiter

    def _start_flush(self) -> None:
        self._flush_handle = None
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.get_running_loop().create_task(self._flush())
        else:  # a write is under way: go again when it ends
            self._flushing.add_done_callback(lambda _: self._start_flush())

    async def _flush(self) -> None:
        data, count = self._batch.take()
        waiters, self._waiters = self._waiters, []
        if count:
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(self._executor, self._batch.write, data)
            except OSError as error:
                self._state.sink_errors += count
                self._state.backlog -= count
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(SinkUnavailable(str(error)))
                return
            self._state.stored += count
            self._state.backlog -= count
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def aclose(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if self._flushing is not None:
            await asyncio.wait([self._flushing])
        await self._flush()
        self._executor.shutdown(wait=True)
        self._batch.close()


class AsyncMongoSink:
    """Group commit (`GroupCommit`) through pymongo's asyncio client: a task per batch,
    a future per `/log` request, resolved when its batch was acknowledged."""

    def __init__(
        self,
        state: ServerState,
        url: str,
        w: int,
        database: str,
        durable: bool = False,
        max_records: int = MONGO_BATCH_MAX_RECORDS,
    ) -> None:
        from pymongo import AsyncMongoClient
        from pymongo.errors import PyMongoError

        self._errors = PyMongoError
        self._client, self._collection = records_collection(
            AsyncMongoClient, url, w, database, durable
        )
        self._commit: GroupCommit[asyncio.Future[None]] = GroupCommit(state, max_records)
        self._flush_handle: asyncio.Handle | None = None
        self._inserting: set[asyncio.Task[None]] = set()
        self._on_idle: list[asyncio.Future[None]] = []  # aclose() waiting for the last batch

    def store(self, record: dict[str, Any]) -> bool:
        """False, the record refused and counted in sink_errors, when WS_SINK_MAX_PENDING
        messages already wait for their inserts."""
        if not self._commit.take_message(record):
            return False
        self._schedule()
        return True

    async def store_and_wait(self, record: dict[str, Any]) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._commit.take_request(record, waiter)
        self._schedule()
        await waiter

    def _schedule(self) -> None:
        """A full batch goes now; otherwise what is due goes on the loop's next turn, so
        every request that arrives in this turn shares the batch."""
        if self._commit.full():
            self._send_due()
        elif self._flush_handle is None and self._commit.due():
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        self._send_due()

    def _send_due(self) -> None:
        loop = asyncio.get_running_loop()
        while (batch := self._commit.next_batch()) is not None:
            task = loop.create_task(self._insert(batch))
            self._inserting.add(task)
            task.add_done_callback(self._inserting.discard)

    async def _insert(self, batch: MongoBatch[asyncio.Future[None]]) -> None:
        failure: Exception | None = None
        try:
            await self._collection.insert_many(batch.documents, ordered=True)
        except Exception as error:  # the database's (503), or a bug (500)
            failure = error
        for waiter in self._commit.settle(batch, stored=failure is None):
            if not waiter.done():  # a request whose handler was cancelled
                if failure is None:
                    waiter.set_result(None)
                else:  # an exception each: one raised in many tasks would grow its traceback
                    waiter.set_exception(_answer(failure, self._errors))
        self._send_due()  # the records that waited for this batch go now
        if self._commit.idle:
            idle, self._on_idle = self._on_idle, []
            for waiter in idle:
                if not waiter.done():
                    waiter.set_result(None)

    async def aclose(self) -> None:
        """Insert everything taken (within CLOSE_TIMEOUT_S), then close the client."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._send_due()
        if not self._commit.idle:
            idle: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._on_idle.append(idle)
            await asyncio.wait([idle], timeout=CLOSE_TIMEOUT_S)
        self._commit.close()
        await self._client.close()


def _answer(failure: Exception, database_errors: type[Exception]) -> Exception:
    """What a request of a failed batch raises: SinkUnavailable (503) for the database's
    errors, RuntimeError (500, a bug) for anything else."""
    if isinstance(failure, database_errors):
        return SinkUnavailable(str(failure))
    return RuntimeError(f"mongo sink insert failed: {failure!r}")


AsyncSink = AsyncEmptySink | AsyncFileSink | AsyncMongoSink


def open_async_sink(options: ServerOptions, state: ServerState) -> AsyncSink:
    """The asyncio sink `options` ask for."""
    return open_sink(
        options,
        empty=lambda: AsyncEmptySink(state),
        file=lambda path: AsyncFileSink(state, path, durable=options.durable),
        mongo=lambda url, w, database: AsyncMongoSink(
            state, url, w, database, durable=options.durable, max_records=options.mongo_batch
        ),
    )
